#!/bin/sh
# A --no-python worker for dtrain run's torchrun scenarios: writes its launcher variables to
# DIR/$RANK (DIR is the first argument), one NAME=VALUE a line.
set -eu
file="$1/$RANK"
echo "creating $file"
{
  echo "RANK=$RANK"
  echo "LOCAL_RANK=$LOCAL_RANK"
  echo "WORLD_SIZE=$WORLD_SIZE"
  echo "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE"
  echo "GROUP_RANK=$GROUP_RANK"
  echo "TORCHELASTIC_MAX_RESTARTS=$TORCHELASTIC_MAX_RESTARTS"
} > "$file.tmp"
mv "$file.tmp" "$file"

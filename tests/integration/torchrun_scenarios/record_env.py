"""A worker for dtrain run's torchrun scenarios (tests/integration/run_torchrun_test.cpp).

Writes what a torchrun worker can see into OUT_DIR/rank<RANK>-restart<TORCHELASTIC_RESTART_COUNT>.json:
the launcher's variables, how Python started it (argv, -u, -m, __main__) and a variable of the
launching shell. Runs as a script, with -m record_env, or through --run-path.

  --out-dir DIR       where to write (required)
  --fail              raise after writing, on every rank
  --fail-rank R       raise after writing on rank R only ...
  --until-restart N   ... while TORCHELASTIC_RESTART_COUNT < N
"""
import argparse
import json
import os
import sys

VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
             "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
             "TEST_SENTINEL_PARENT")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--until-restart", type=int, default=1 << 30)
    args, rest = parser.parse_known_args()
    env = os.environ
    restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "-1"))
    record = {name: env.get(name) for name in VARIABLES}
    record["argv"] = sys.argv
    record["rest"] = rest
    record["unbuffered"] = "-u" in getattr(sys, "orig_argv", [])
    record["module"] = __spec__.name if __spec__ is not None else None
    record["name"] = __name__
    path = os.path.join(args.out_dir, "rank%s-restart%d.json" % (env.get("RANK"), restart))
    with open(path + ".tmp", "w") as out:
        json.dump(record, out)
    os.rename(path + ".tmp", path)  # whole or absent: the test reads it only after the run
    print("recorded", path, flush=True)
    failing = args.fail or (int(env["RANK"]) == args.fail_rank and restart < args.until_restart)
    if failing:
        raise RuntimeError("record_env: failing as asked (restart %d)" % restart)


if __name__ == "__main__":
    main()

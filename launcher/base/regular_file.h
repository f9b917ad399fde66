#pragma once
// The one way dtrain reads a file it did not just write itself: a spec, a hostfile, an env_file,
// an ssh_config, and every file of a run directory that `dtrain report`, `status` or `logs` read.
// A path can name a FIFO (open or read would wait forever), a socket, a device (/dev/zero is
// endless), a directory, a symbolic link planted by someone else, or a file of any size; each
// is refused at once, before a byte is read, with a message that says which.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"

namespace dtrain {

/// Whether a symbolic link as the LAST component of the path is followed. kNo where the name is
/// not the user's own choice (a file inside a run directory, whose name dtrain made up): a link
/// there was planted, and is refused ("is a symbolic link"). Links in the directories above are
/// followed either way (the run directory itself may live behind one).
enum class FollowLinks { kYes, kNo };

/// "a FIFO (named pipe)", "a socket", "a character device", "a block device", "a directory",
/// "a symbolic link", "a regular file", or "not a regular file (mode 0NNNNNN)" for `st_mode`.
std::string describe_file_type(unsigned st_mode);

/// Opens `path` for reading, never blocking and never reading: stat first (lstat for kNo), then
/// open(O_RDONLY | O_NONBLOCK | O_CLOEXEC, + O_NOFOLLOW for kNo), then fstat of what was
/// opened. Anything but a regular file is a user error "'path' is a FIFO (named pipe), not a
/// regular file" (or a socket, a device, a directory, a symbolic link); a missing or unreadable
/// file is a user error "cannot read 'path': <strerror>". A FIFO is never waited on: O_NONBLOCK opens it at
/// once and fstat refuses it. The fd is a regular file opened O_NONBLOCK (which regular files
/// ignore).
Result<UniqueFd> open_regular_file(const std::string& path, FollowLinks follow);

/// open_regular_file(), then the whole file if it holds at most `max_bytes`. A file over the
/// limit (by fstat, before reading; or grown past it while being read) is a user error
/// "'path' is 1.0 GiB, over the 16 MiB limit[; <too_large_fix>]".
Result<std::string> read_regular_file(const std::string& path, size_t max_bytes, FollowLinks follow,
                                      std::string_view too_large_fix = "");

/// `path` with a leading "~" or "~/" replaced by $HOME (the passwd entry's home when HOME is
/// unset), as ssh and a shell read it; any other path unchanged.
std::string expand_home(const std::string& path);

/// A mode for a data file dtrain writes (checkpoint.file_mode, dtrain report --mode) from octal
/// text ("0600", "0640", "644"): owner read-write (to rewrite and prune), no execute bit, no
/// write for others. nullopt for anything else. (worker/runtime applies the same rule to
/// DTRAIN_CKPT_FILE_MODE: it does not link base.)
std::optional<int> parse_data_file_mode(std::string_view text);

/// "16 MiB", "512 KiB", "1.0 GiB", "300 bytes": a size for a message.
std::string describe_bytes(unsigned long long bytes);

}  // namespace dtrain

#include "core/atomic_file.h"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <system_error>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "core/error.h"

namespace teeny {
namespace fs = std::filesystem;
namespace {

std::string reason(int err) { return std::generic_category().message(err); }

std::string cannot_write(std::string_view what, const std::string& path, const std::string& why) {
  return what.empty() ? fmt::format("cannot write {}: {}", path, why)
                      : fmt::format("cannot write {} '{}': {}", what, path, why);
}

// ".<base>.<kind>-<pid>-<n>" in `parent`: hidden, unique across processes and threads, and
// carrying the pid so that a later writer can tell a dead process's leftovers.
fs::path sibling_name(const fs::path& parent, const std::string& base, const char* kind) {
  static std::atomic<unsigned> counter{0};
  return parent / fmt::format(".{}.{}-{}-{}", base, kind, static_cast<long>(::getpid()), counter++);
}

// Creates `file` (permissions from the umask, as any other tool's output), writes and fsyncs
// `bytes`. Returns 0 or the errno of the first failure (disk full, file size limit, I/O error).
int write_synced(const fs::path& file, std::string_view bytes) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return errno;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return err;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  return ::close(fd) == 0 ? 0 : errno;
}

bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// What a name sibling_name made says: ".<base>.<kind>-<pid>-<n>".
struct Sibling {
  std::string base;
  bool set_aside = false;  // kind "old": a previous directory moved out of the way
  long pid = 0;            // 0: not such a name
};

Sibling parse_sibling(const std::string& name) {
  if (name.empty() || name[0] != '.') return {};
  for (const char* kind : {".tmp-", ".old-"}) {
    const size_t at = name.rfind(kind);
    if (at == std::string::npos || at <= 1) continue;
    const char* digits = name.c_str() + at + 5;
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    if (end == digits || *end != '-') continue;
    const char* counter = end + 1;
    std::strtoul(counter, &end, 10);
    if (std::isdigit(static_cast<unsigned char>(*counter)) && *end == '\0' && pid > 0) {
      return {name.substr(1, at - 1), kind[1] == 'o', pid};
    }
  }
  return {};
}

// Temporary files and directories, and set-aside directories, that a teeny process left in
// `parent` when it died mid-write (SIGKILL, power loss), whatever target they were for: any
// teeny command that writes into a folder clears them, so none survives the next one. A
// set-aside directory whose target is missing (killed between the two renames of
// move_into_place's fallback) is the previous version: it is put back, not removed. Once per
// folder and process.
void remove_stale_siblings(const fs::path& parent) {
  static std::mutex mutex;
  static std::set<std::string> cleaned;
  std::error_code ec;
  const fs::path folder = fs::absolute(parent, ec).lexically_normal();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!cleaned.insert(folder.string()).second) return;
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const Sibling sibling = parse_sibling(entry.path().filename().string());
    if (sibling.pid == 0 || process_alive(sibling.pid)) continue;
    const fs::path target = folder / sibling.base;
    if (sibling.set_aside && !fs::exists(target, ec)) {
      fs::rename(entry.path(), target, ec);
    } else {
      fs::remove_all(entry.path(), ec);
    }
  }
}

// Puts the finished directory `temp` at `target`, replacing what is there.
void move_into_place(const fs::path& temp, const fs::path& target, const fs::path& parent, const std::string& base) {
  std::error_code ec;
  if (!fs::exists(target, ec)) {
    fs::rename(temp, target);
    return;
  }
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(temp, ec);  // now holds the previous directory
    return;
  }
  const fs::path old = sibling_name(parent, base, "old");
  fs::rename(target, old);
  try {
    fs::rename(temp, target);
  } catch (...) {
    fs::rename(old, target, ec);
    throw;
  }
  fs::remove_all(old, ec);
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes, std::string_view what) {
  const fs::path target(path);
  remove_stale_siblings(target.parent_path().empty() ? fs::path(".") : target.parent_path());
  const fs::path temp = sibling_name(target.parent_path(), target.filename().string(), "tmp");
  int err = write_synced(temp, bytes);
  if (err == 0 && std::rename(temp.c_str(), target.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(temp.c_str());
    throw Error(cannot_write(what, path, reason(err)));
  }
}

void write_new_file(const fs::path& file, std::string_view bytes) {
  if (const int err = write_synced(file, bytes); err != 0) throw Error(cannot_write({}, file.string(), reason(err)));
}

void write_directory_atomically(const std::string& path, std::string_view what,
                                const std::function<void(const fs::path& temp)>& fill) {
  fs::path target = fs::path(path).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out.teeny/"
  const std::string base = target.filename().string();
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  remove_stale_siblings(parent);

  const fs::path temp = sibling_name(parent, base, "tmp");
  std::error_code ec;
  if (!fs::create_directory(temp, ec)) {
    throw Error(cannot_write(what, path, fmt::format("cannot create {}: {}", temp.string(), ec.message())));
  }
  try {
    fill(temp);
    move_into_place(temp, target, parent, base);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(temp, ec);
    throw Error(cannot_write(what, path, e.code().message() + ": " + e.path1().string()));
  } catch (const Error& e) {
    fs::remove_all(temp, ec);
    throw Error(cannot_write(what, path, e.message()));
  }
}

}  // namespace teeny

// Files and directories that appear whole or not at all. Everything is first written under a
// unique temporary name in the target's own directory (same filesystem, so the final rename is
// atomic), fsynced, then renamed over the target: a reader, a concurrent teeny process or a crash
// never sees a partial file, and a failed write leaves nothing behind. The temporary names carry
// the writer's pid (".<name>.tmp-<pid>-<n>", ".<name>.old-<pid>-<n>"): what a killed writer left
// is removed by the next write into the same folder, whatever its target.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace teeny {

// Replaces `path` with `bytes`. Throws Error "cannot write <what> '<path>': <reason>" (without
// `what`: "cannot write <path>: <reason>"); the temporary file is removed on failure.
void write_file_atomically(const std::string& path, std::string_view bytes, std::string_view what = {});

// Creates `file` (inside a directory being built by write_directory_atomically) with `bytes`
// and fsyncs it. Throws Error "cannot write <file>: <reason>".
void write_new_file(const std::filesystem::path& file, std::string_view bytes);

// Replaces the directory `path` with one that `fill` writes into the temporary directory it is
// given: swapped in atomically where the filesystem can (renameat2 RENAME_EXCHANGE), else the old
// one is moved aside first. Throws Error "cannot write <what> '<path>': <reason>".
void write_directory_atomically(const std::string& path, std::string_view what,
                                const std::function<void(const std::filesystem::path& temp)>& fill);

}  // namespace teeny

#include "checkpoint/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace cctune {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("open directory '", dir, "' for fsync: ", ErrnoText(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; the rename itself has already happened.
  if (rc != 0 && err != EINVAL && err != EROFS) {
    return absl::InternalError(absl::StrCat("fsync directory '", dir, "': ", ErrnoText(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    const std::string& path) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("atomic write: bad file path '", path, "'"));
  }
  static std::atomic<uint64_t> counter{0};
  // A unique name per process and call; O_EXCL guards against leftovers from a crash.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string temp = absl::StrCat(DirName(path), "/.", BaseName(path), ".tmp.",
                                          ::getpid(), ".", counter.fetch_add(1));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, temp, fd));
    }
    if (errno != EEXIST) {
      return absl::InternalError(absl::StrCat("create temporary file '", temp, "' for '", path,
                                              "': ", ErrnoText(errno)));
    }
  }
  return absl::InternalError(absl::StrCat("could not create a temporary file for '", path, "'"));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

absl::Status AtomicFileWriter::Append(const void* data, size_t bytes) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("write to '", path_, "' after Commit() or a failed write"));
  }
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t chunk = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      return absl::InternalError(absl::StrCat("write '", temp_path_, "' (for '", path_,
                                              "') after ", bytes_written_,
                                              " bytes: ", ErrnoText(err)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    bytes_written_ += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0 || committed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Commit() of '", path_, "' after a failed write or a second time"));
  }
  if (::fsync(fd_) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    return absl::InternalError(absl::StrCat("fsync '", temp_path_, "': ", ErrnoText(err)));
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("close '", temp_path_, "': ", ErrnoText(errno)));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("rename '", temp_path_, "' to '", path_,
                                            "': ", ErrnoText(errno)));
  }
  committed_ = true;
  return FsyncDir(DirName(path_));
}

bool IsAtomicWriteTemporary(absl::string_view filename) {
  auto all_digits = [](absl::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
  };
  if (!absl::ConsumePrefix(&filename, ".")) return false;
  const size_t tmp = filename.rfind(".tmp.");
  if (tmp == absl::string_view::npos || tmp == 0) return false;
  const absl::string_view suffix = filename.substr(tmp + 5);  // <pid>.<n>
  const size_t dot = suffix.find('.');
  return dot != absl::string_view::npos && all_digits(suffix.substr(0, dot)) &&
         all_digits(suffix.substr(dot + 1));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> w, AtomicFileWriter::Create(path));
  CCTUNE_RETURN_IF_ERROR(w->Append(contents));
  return w->Commit();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no such file '", path, "'"));
    return absl::InternalError(absl::StrCat("stat '", path, "': ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("read error on '", path, "'"));
  return ss.str();
}

}  // namespace cctune

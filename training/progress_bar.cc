#include "training/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cctune {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "??:??";
  const int64_t s = static_cast<int64_t>(seconds);
  const int64_t h = s / 3600, m = (s / 60) % 60, sec = s % 60;
  if (h > 0) return absl::StrFormat("%d:%02d:%02d", h, m, sec);
  return absl::StrFormat("%02d:%02d", m, sec);
}

std::string RenderProgress(const std::string& description, int64_t done, int64_t total,
                           double elapsed_seconds, double rate, const std::string& postfix,
                           int width) {
  std::string line = description.empty() ? "" : absl::StrCat(description, ": ");
  std::string rate_text;
  if (rate <= 0) {
    rate_text = "?it/s";
  } else if (rate >= 1) {
    rate_text = absl::StrFormat("%.2fit/s", rate);
  } else {
    rate_text = absl::StrFormat("%.2fs/it", 1.0 / rate);
  }
  if (total > 0) {
    const double frac = std::clamp(static_cast<double>(done) / total, 0.0, 1.0);
    // Eighth-block resolution: U+2588 (full) down to U+258F (one eighth).
    static const char* const kPartial[] = {"",       "\u258F", "\u258E", "\u258D",
                                           "\u258C", "\u258B", "\u258A", "\u2589"};
    const int64_t eighths = static_cast<int64_t>(frac * width * 8);
    std::string bar;
    int cells = 0;
    for (int64_t i = 0; i < eighths / 8; ++i, ++cells) bar += "\u2588";
    if (eighths % 8 != 0 && cells < width) {
      bar += kPartial[eighths % 8];
      ++cells;
    }
    bar.append(width - cells, ' ');
    const double eta = rate > 0 ? (total - done) / rate : -1;
    absl::StrAppend(&line, absl::StrFormat("%3d%%|", static_cast<int>(frac * 100)), bar, "| ", done,
                    "/", total, " [", FormatDuration(elapsed_seconds), "<", FormatDuration(eta),
                    ", ", rate_text, "]");
  } else {
    absl::StrAppend(&line, done, " [", FormatDuration(elapsed_seconds), ", ", rate_text, "]");
  }
  if (!postfix.empty()) absl::StrAppend(&line, " ", postfix);
  return line;
}

ProgressBar::ProgressBar(std::string description, int64_t total, std::FILE* out, bool force)
    : description_(std::move(description)),
      total_(total),
      out_(out),
      enabled_(out != nullptr && (force || ::isatty(::fileno(out)) == 1)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { Close(); }

void ProgressBar::ResetClock() {
  start_ = std::chrono::steady_clock::now();
  start_done_ = done_;
}

void ProgressBar::Update(int64_t done, const std::string& postfix) {
  done_ = done;
  postfix_ = postfix;
  if (!enabled_ || closed_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
  last_draw_ = now;
  Draw();
}

void ProgressBar::Draw() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // The rate counts only the steps made since the clock started.
  const double rate = elapsed > 0 ? (done_ - start_done_) / elapsed : 0.0;
  std::string line = RenderProgress(description_, done_, total_, elapsed, rate, postfix_);
  const size_t width = line.size();
  if (width < last_width_) line.append(last_width_ - width, ' ');
  last_width_ = width;
  std::fputc('\r', out_);
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::Close() {
  if (closed_) return;
  if (enabled_) {
    Draw();
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  closed_ = true;
}

}  // namespace cctune

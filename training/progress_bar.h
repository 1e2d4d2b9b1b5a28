// A terminal progress bar with rate and ETA for long runs, drawn on stderr only when stderr is a
// terminal (logs redirected to a file stay clean):
//   train: 37%|███████▍            | 37/100 [00:12<00:21,  3.05it/s] loss=2.310
// Redraws are throttled (at most every 0.1 s) and the line is rewritten with '\r'.
#ifndef CCTUNE_TRAINING_PROGRESS_BAR_H_
#define CCTUNE_TRAINING_PROGRESS_BAR_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cctune {

// "05:07", "1:02:03" (hours when needed); "??:??" for a negative or non-finite value.
std::string FormatDuration(double seconds);

// The bar's text for `done` of `total` after `elapsed` seconds at `rate` items per second
// (<= 0: unknown, no ETA); `width` bar cells. Pure, so tests can check it without a clock.
// total <= 0 draws no bar and no ETA.
std::string RenderProgress(const std::string& description, int64_t done, int64_t total,
                           double elapsed_seconds, double rate, const std::string& postfix,
                           int width = 20);

class ProgressBar {
 public:
  // Draws on `out` (not owned) when it is a terminal, or always when `force` is set.
  ProgressBar(std::string description, int64_t total, std::FILE* out = stderr, bool force = false);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool enabled() const { return enabled_; }
  // Sets the position to `done` (e.g. the step) and the text after the bar.
  void Update(int64_t done, const std::string& postfix = "");
  // Starts the rate clock over from the current position (e.g. after a resume, so the ETA
  // does not count the skipped steps as instant).
  void ResetClock();
  // Draws the final state and ends the line. Idempotent; the destructor calls it.
  void Close();

 private:
  void Draw();

  std::string description_;
  int64_t total_;
  std::FILE* out_;
  bool enabled_;
  bool closed_ = false;
  int64_t done_ = 0;
  int64_t start_done_ = 0;
  std::string postfix_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  size_t last_width_ = 0;
  bool drawn_ = false;
};

}  // namespace cctune

#endif  // CCTUNE_TRAINING_PROGRESS_BAR_H_

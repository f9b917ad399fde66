#pragma once
// Keeping the report small at any size: curves bucketed to a fixed number of points and the
// per-rank step times bucketed into a fixed grid, so a run of 16,384 ranks and a week of
// metrics draws in as many SVG elements as a short one.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/report/run_record.h"

namespace dtrain::report {

struct Point {
  double x = 0, y = 0;
};

/// The points whose x fall in [x0, x1]: their minimum, mean and maximum y.
struct Bucket {
  double x0 = 0, x1 = 0;
  double min = 0, mean = 0, max = 0;
  size_t count = 0;
};

/// At most `max_buckets` buckets over the x range of `points` (any order), each of equal
/// width, oldest first; empty ones are left out. With no more points than buckets, one bucket
/// per point. Non-finite points are ignored.
std::vector<Bucket> bucket_series(const std::vector<Point>& points, size_t max_buckets);

/// Per-rank step time over wall time. A row is one rank, or a block of consecutive ranks when
/// there are more than fit (its value is the slowest rank's, so a straggler stands out in any
/// block); a column is a slice of wall time (its value: the rank's mean step time then).
/// Summary metrics lines (> 64 ranks) list only the ranks that stand out; every other rank of
/// such a line is taken to step at the line's median.
struct HeatMap {
  struct Row {
    int first_rank = 0, last_rank = 0;
  };
  std::vector<Row> rows;
  int64_t start_ms = 0;
  int64_t column_ms = 1;
  size_t columns = 0;
  /// rows × columns, row-major; NaN where no rank of the row reported in that slice.
  std::vector<double> cells;
  double min = 0, max = 0;  ///< over the finite cells
  double at(size_t row, size_t column) const { return cells[row * columns + column]; }
};

/// The most ranks a heat map covers: a bound on memory whatever a damaged file claims (65,536
/// ranks x 120 columns is ~94 MB); ranks past it are left out.
inline constexpr int kMaxHeatMapRanks = 65536;

/// `world_size` 0: the highest rank seen + 1 (at most kMaxHeatMapRanks).
HeatMap step_time_heat_map(const std::vector<TrainingSample>& samples, int world_size, size_t max_rows,
                           size_t max_columns);

}  // namespace dtrain::report

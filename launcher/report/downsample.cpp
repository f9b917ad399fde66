#include "launcher/report/downsample.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtrain::report {

std::vector<Bucket> bucket_series(const std::vector<Point>& input, size_t max_buckets) {
  std::vector<Point> points;
  points.reserve(input.size());
  for (const Point& point : input) {
    if (std::isfinite(point.x) && std::isfinite(point.y)) points.push_back(point);
  }
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  std::vector<Bucket> buckets;
  if (points.empty() || max_buckets == 0) return buckets;
  if (points.size() <= max_buckets) {
    for (const Point& point : points) buckets.push_back({point.x, point.x, point.y, point.y, point.y, 1});
    return buckets;
  }
  double low = points.front().x, high = points.back().x;
  double width = (high - low) / static_cast<double>(max_buckets);
  std::vector<Bucket> all(max_buckets);
  for (size_t i = 0; i < max_buckets; ++i) {
    all[i].x0 = low + width * static_cast<double>(i);
    all[i].x1 = i + 1 == max_buckets ? high : low + width * static_cast<double>(i + 1);
  }
  for (const Point& point : points) {
    size_t index = width > 0 ? static_cast<size_t>((point.x - low) / width) : 0;
    Bucket& bucket = all[std::min(index, max_buckets - 1)];
    if (bucket.count == 0) bucket.min = bucket.max = point.y;
    bucket.min = std::min(bucket.min, point.y);
    bucket.max = std::max(bucket.max, point.y);
    bucket.mean += point.y;  // a sum until the end
    ++bucket.count;
  }
  for (Bucket& bucket : all) {
    if (bucket.count == 0) continue;
    bucket.mean /= static_cast<double>(bucket.count);
    buckets.push_back(bucket);
  }
  return buckets;
}

HeatMap step_time_heat_map(const std::vector<TrainingSample>& samples, int world_size, size_t max_rows,
                           size_t max_columns) {
  HeatMap map;
  if (world_size <= 0) {
    for (const TrainingSample& sample : samples) {
      for (const RankSample& rank : sample.ranks) {  // int64: a rank of INT_MAX must not overflow
        world_size = static_cast<int>(std::min<int64_t>(std::max<int64_t>(world_size, int64_t{rank.rank} + 1),
                                                        kMaxHeatMapRanks));
      }
    }
  }
  // world_size and ranks come from the run directory (untrusted): one damaged line saying
  // 2,000,000,000 must not size the per-rank arrays. Ranks past the cap are left out of the map.
  world_size = std::min(world_size, kMaxHeatMapRanks);
  if (samples.empty() || world_size <= 0 || max_rows == 0 || max_columns == 0) return map;
  int64_t start = samples.front().wall_ms, end = samples.front().wall_ms;
  for (const TrainingSample& sample : samples) {
    start = std::min(start, sample.wall_ms);
    end = std::max(end, sample.wall_ms);
  }
  map.start_ms = start;
  map.columns = std::min(max_columns, samples.size());
  map.column_ms = std::max<int64_t>(1, (end - start) / static_cast<int64_t>(map.columns) + 1);

  // Per rank and column: sum and count of step times (a rank a summary line does not list
  // counts at the median).
  size_t ranks = static_cast<size_t>(world_size);
  std::vector<double> sums(ranks * map.columns, 0.0);
  std::vector<uint32_t> counts(ranks * map.columns, 0);
  std::vector<char> listed(ranks, 0);
  for (const TrainingSample& sample : samples) {
    size_t column = std::min(map.columns - 1, static_cast<size_t>((sample.wall_ms - start) / map.column_ms));
    std::fill(listed.begin(), listed.end(), 0);
    for (const RankSample& rank : sample.ranks) {
      if (rank.rank < 0 || rank.rank >= world_size || !rank.metrics.step_ms) continue;
      size_t at = static_cast<size_t>(rank.rank) * map.columns + column;
      sums[at] += *rank.metrics.step_ms;
      ++counts[at];
      listed[static_cast<size_t>(rank.rank)] = 1;
    }
    const std::optional<Spread>& step_ms = sample.spread(&contract::BeatMetrics::step_ms);
    if (sample.summary && step_ms) {
      for (size_t rank = 0; rank < ranks; ++rank) {
        if (listed[rank]) continue;
        sums[rank * map.columns + column] += step_ms->median;
        ++counts[rank * map.columns + column];
      }
    }
  }

  size_t per_row = (ranks + max_rows - 1) / max_rows;
  for (size_t first = 0; first < ranks; first += per_row) {
    map.rows.push_back({static_cast<int>(first), static_cast<int>(std::min(ranks, first + per_row) - 1)});
  }
  map.cells.assign(map.rows.size() * map.columns, std::numeric_limits<double>::quiet_NaN());
  bool any = false;
  for (size_t row = 0; row < map.rows.size(); ++row) {
    for (size_t column = 0; column < map.columns; ++column) {
      double slowest = std::numeric_limits<double>::quiet_NaN();
      for (int rank = map.rows[row].first_rank; rank <= map.rows[row].last_rank; ++rank) {
        size_t at = static_cast<size_t>(rank) * map.columns + column;
        if (counts[at] == 0) continue;
        double mean = sums[at] / counts[at];
        if (std::isnan(slowest) || mean > slowest) slowest = mean;
      }
      map.cells[row * map.columns + column] = slowest;
      if (std::isnan(slowest)) continue;
      map.min = any ? std::min(map.min, slowest) : slowest;
      map.max = any ? std::max(map.max, slowest) : slowest;
      any = true;
    }
  }
  return map;
}

}  // namespace dtrain::report

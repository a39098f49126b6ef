#include "parallel/pipeline/schedule_table.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace titan::parallel::pipeline {
namespace {

std::string fixed3(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

std::string pad(const std::string& text, size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}

}  // namespace

std::string schedule_figures(const Simulation& simulation) {
  std::ostringstream os;
  os << "makespan " << simulation.makespan << ", bubble " << fixed3(simulation.bubble)
     << " (idle / (ranks x makespan))\n";
  os << "bubble per rank:";
  for (size_t r = 0; r < simulation.ranks.size(); ++r) {
    os << (r == 0 ? " " : ", ") << "r" << r << " " << fixed3(simulation.ranks[r].bubble);
  }
  os << "\npeak held microbatches per rank:";
  for (size_t r = 0; r < simulation.ranks.size(); ++r) {
    os << (r == 0 ? " " : ", ") << "r" << r << " " << simulation.ranks[r].peak_held;
  }
  os << "\n";
  return os.str();
}

std::string schedule_table(const PipelineSchedule& schedule, const Simulation& simulation) {
  const size_t pp = simulation.timeline.size();
  const size_t rows = static_cast<size_t>(simulation.makespan);
  std::vector<std::vector<std::string>> cells(rows, std::vector<std::string>(pp, "."));
  for (size_t r = 0; r < pp; ++r) {
    for (const TimedAction& timed : simulation.timeline[r]) {
      for (int64_t t = timed.start; t < timed.end; ++t) {
        cells[static_cast<size_t>(t)][r] = to_string(timed.action);
      }
    }
  }
  std::vector<size_t> width(pp);
  for (size_t r = 0; r < pp; ++r) {
    width[r] = ("rank " + std::to_string(r)).size();
    for (const auto& row : cells) width[r] = std::max(width[r], row[r].size());
  }
  const size_t time_width = std::max<size_t>(1, std::to_string(rows == 0 ? 0 : rows - 1).size());

  const SimulationCosts& c = simulation.costs;
  std::ostringstream os;
  os << kScheduleKindNames.name(schedule.kind) << ", pp " << schedule.pp() << ", v "
     << schedule.placement.stages_per_rank() << ", m " << schedule.microbatches << "; costs F "
     << c.forward << ", B " << c.backward_full << ", I " << c.backward_input << ", W "
     << c.backward_weight << "\n";
  auto emit = [&](const std::string& time, const std::vector<std::string>& row) {
    std::string text = std::string(time_width - std::min(time_width, time.size()), ' ') + time;
    for (size_t r = 0; r < pp; ++r) {
      text += "  " + (r + 1 == pp ? row[r] : pad(row[r], width[r]));
    }
    os << text << "\n";
  };
  std::vector<std::string> header;
  for (size_t r = 0; r < pp; ++r) header.push_back("rank " + std::to_string(r));
  emit("t", header);
  for (size_t t = 0; t < rows; ++t) emit(std::to_string(t), cells[t]);
  os << schedule_figures(simulation);
  return os.str();
}

}  // namespace titan::parallel::pipeline

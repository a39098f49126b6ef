#include "app/pipeline_cost_report.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "parallel/pipeline/run_replay.h"
#include "parallel/pipeline/schedule_simulator.h"

namespace titan::app {

namespace pipeline = parallel::pipeline;

void PipelineRuns::add(const parallel::PipelineTiming& run) {
  total += run;
  ran.push_back(run.ran);
  if (ran.size() > kReplayed) ran.pop_front();
}

PipelineCosts sum_pipeline_costs(const PipelineRuns& runs, const parallel::DeviceMesh& mesh) {
  // One all-reduce of every figure: packed in PipelineTiming's field order, read back the same.
  const parallel::PipelineTiming& r = runs.total;
  std::vector<double> figures;
  for (double s : r.compute_seconds) figures.push_back(s);
  for (int64_t n : r.computes) figures.push_back(static_cast<double>(n));
  figures.push_back(r.wait_seconds);
  figures.push_back(r.seconds);
  figures.push_back(static_cast<double>(r.weight_grads_run_early));
  Tensor sums = Tensor::from_vector<double>(figures, {static_cast<int64_t>(figures.size())});
  // And the slowest rank's pipeline time: the run's makespan, for the bubble in the
  // simulator's terms (pipeline::measured_bubble).
  Tensor slowest = Tensor::from_vector<double>({r.seconds}, {1});
  if (mesh.size() > 1) {
    mesh.comm().all_reduce(sums, parallel::ReduceOp::Sum);
    mesh.comm().all_reduce(slowest, parallel::ReduceOp::Max);
  }
  const double* f = sums.data<double>();
  PipelineCosts costs;
  parallel::PipelineTiming& s = costs.summed;
  const size_t kinds = s.compute_seconds.size();
  for (size_t k = 0; k < kinds; ++k) {
    s.compute_seconds[k] = f[k];
    s.computes[k] = std::llround(f[kinds + k]);
  }
  s.wait_seconds = f[2 * kinds];
  s.seconds = f[2 * kinds + 1];
  s.weight_grads_run_early = std::llround(f[2 * kinds + 2]);
  costs.slowest_seconds = slowest.data<double>()[0];
  return costs;
}

std::optional<std::string> pipeline_cost_line(const PipelineCosts& costs,
                                              const pipeline::PipelineSchedule& schedule,
                                              int64_t ranks, const std::string& replayed) {
  const parallel::PipelineTiming& s = costs.summed;
  if (s.seconds <= 0) return std::nullopt;  // nothing timed: a run of one step
  const double measured =
      pipeline::measured_bubble(s.seconds, s.wait_seconds, ranks, costs.slowest_seconds);
  // Mean milliseconds of one stage's compute on one microbatch, by kind (F, B, I, W); 0 for a
  // kind not run.
  std::array<double, 4> ms{};
  for (size_t k = 0; k < ms.size(); ++k) {
    ms[k] = s.computes[k] > 0 ? 1000.0 * s.compute_seconds[k] / static_cast<double>(s.computes[k])
                              : 0.0;
  }
  // The schedule simulated with those costs (in microseconds), against the bubble measured in
  // the same terms: the ranks' idle share of the slowest one's pipeline time.
  auto micros = [](double v) { return std::max<int64_t>(1, std::llround(1000.0 * v)); };
  pipeline::SimulationCosts simulation_costs;
  simulation_costs.forward = micros(ms[0]);
  simulation_costs.backward_full = micros(ms[1] > 0 ? ms[1] : ms[2] + ms[3]);
  simulation_costs.backward_input = micros(ms[2] > 0 ? ms[2] : ms[1] / 2);
  simulation_costs.backward_weight = micros(ms[3] > 0 ? ms[3] : ms[1] / 2);
  const pipeline::ValueOrRefusal<pipeline::Simulation> simulated =
      pipeline::simulate(schedule, simulation_costs);
  // The Ws the executor ran ahead of their place while a receive was late (PipelineExecutor).
  const int64_t weight_grads = s.computes[3];
  const std::string early = weight_grads > 0
                                ? fmt::format("; {} of the {} W ran early, in place of a wait",
                                              s.weight_grads_run_early, weight_grads)
                                : std::string();
  return fmt::format(
      "pipeline: one stage on one microbatch took F {:.2f} ms, B {:.2f} ms, I {:.2f} ms, W {:.2f} "
      "ms (mean over ranks and steps after the first); simulated with these costs the schedule "
      "idles {:.3f} of the time{}; measured {:.3f}{}",
      ms[0], ms[1], ms[2], ms[3], simulated ? simulated.value().bubble : std::nan(""), replayed,
      measured, early);
}

std::string replayed_bubble_text(const PipelineRuns& runs,
                                 const pipeline::PipelineSchedule& schedule,
                                 const parallel::DeviceMesh& mesh) {
  // Each rank's runs, as (list index, microseconds) pairs in a [run][pp rank][compute] layout
  // padded to the longest list, summed over the pp group: each rank fills only its own rows.
  const int64_t pp = schedule.pp();
  std::vector<size_t> computes(static_cast<size_t>(pp), 0);
  for (size_t r = 0; r < computes.size(); ++r) {
    for (const pipeline::Action& a : schedule.ranks[r]) computes[r] += a.is_compute() ? 1 : 0;
  }
  const size_t widest = *std::max_element(computes.begin(), computes.end());
  const size_t count = runs.ran.size();
  const parallel::DeviceMesh pp_group = mesh[parallel::MeshDim::Pp];
  const size_t me = static_cast<size_t>(pp_group.rank());
  auto at = [&](size_t run, size_t rank, size_t n) {
    return ((run * static_cast<size_t>(pp) + rank) * widest + n) * 2;
  };
  std::vector<double> rows(count * static_cast<size_t>(pp) * widest * 2, 0.0);
  for (size_t run = 0; run < count; ++run) {
    const std::vector<pipeline::RanCompute>& ran = runs.ran[run];
    for (size_t n = 0; n < ran.size() && n < widest; ++n) {
      rows[at(run, me, n)] = static_cast<double>(ran[n].index);
      rows[at(run, me, n) + 1] = static_cast<double>(ran[n].cost);
    }
  }
  if (rows.empty()) return "";
  Tensor all = Tensor::from_vector<double>(rows, {static_cast<int64_t>(rows.size())});
  pp_group.comm().all_reduce(all, parallel::ReduceOp::Sum);
  if (mesh.world_rank() != 0) return "";
  const double* f = all.data<double>();
  std::vector<std::vector<std::vector<pipeline::RanCompute>>> replays(count);
  for (size_t run = 0; run < count; ++run) {
    for (size_t r = 0; r < computes.size(); ++r) {
      std::vector<pipeline::RanCompute>& ran = replays[run].emplace_back();
      for (size_t n = 0; n < computes[r]; ++n) {
        ran.push_back({std::llround(f[at(run, r, n)]), std::llround(f[at(run, r, n) + 1])});
      }
    }
  }
  const pipeline::ValueOrRefusal<double> bubble = pipeline::replayed_bubble(schedule, replays);
  if (!bubble) return fmt::format(", not replayed ({})", bubble.error());
  return fmt::format(", and with each action's own time {:.3f}", bubble.value());
}

void report_pipeline_costs(const PipelineRuns& runs, const pipeline::PipelineSchedule& schedule,
                           const parallel::DeviceMesh& mesh) {
  // Both are collectives: every rank runs them before rank 0 alone writes.
  const std::string replayed = replayed_bubble_text(runs, schedule, mesh);
  const PipelineCosts costs = sum_pipeline_costs(runs, mesh);
  if (mesh.world_rank() != 0) return;
  const std::optional<std::string> line =
      pipeline_cost_line(costs, schedule, mesh.dims().world_size, replayed);
  if (line) spdlog::info("{}", *line);
}

std::vector<double> max_per_pp_coordinate(const parallel::DeviceMesh& mesh, double value) {
  const int64_t world = mesh.size(), pp = mesh.degree(parallel::MeshDim::Pp);
  Tensor all = Tensor::empty({world}, DType::F64);
  mesh.comm().all_gather(all, Tensor::from_vector<double>({value}, {1}));
  std::vector<double> per_rank(static_cast<size_t>(pp), 0.0);
  const int64_t per_coordinate = world / pp;  // pp is the mesh's outermost dim
  for (int64_t w = 0; w < world; ++w) {
    double& slot = per_rank[static_cast<size_t>(w / per_coordinate)];
    slot = std::max(slot, all.data<double>()[w]);
  }
  return per_rank;
}

}  // namespace titan::app

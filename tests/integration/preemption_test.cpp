// Preemption (issue 28): SIGTERM to the supervisor — a spot notice, a pod deletion, a site's
// `scancel --signal=TERM` — and `dtrain stop --checkpoint` ask every rank to save one step, wait
// for it (up to preempt_grace), then stop; the run ends `preempted` (exit 6) and `dtrain resume`
// continues from that step. Workers that cannot be asked (unmodified scripts) get SIGTERM with
// preempt_grace instead of stop_grace. Real supervisors, real workers (the reference trainer, a
// PyTorch DDP script through dtrain_worker, plain scripts), real signals; nothing left after.

#include <doctest/doctest.h>

#include <signal.h>

#include <string>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

std::string trainer_spec(const std::string& name, int steps) {
  // No interval checkpoints: the only one can come from the preemption's request.
  return "version: 1\nname: " + name +
         "\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"" + std::to_string(steps) +
         "\", --log-every, \"50\"]\n  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "stop_grace: 2s\npreempt_grace: 30s\n";
}

std::string final_line(const std::string& log) {
  size_t at = log.rfind("dtrain-train: final");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

nlohmann::json state_of(const std::string& dir) {
  return nlohmann::json::parse(read_text(dir + "/state.json"), nullptr, false);
}

/// The preemption of a run of the reference trainer, by `preempt` (a signal or dtrain stop):
/// both ranks save the step asked, the run ends preempted, and resume ends as an uninterrupted
/// run would (the same final loss and checksum on every rank).
void check_trainer_preemption(const std::function<void(DtrainEnv&, DtrainProcess&, const std::string&)>& preempt,
                              const std::string& why) {
  constexpr int kSteps = 400;
  DtrainEnv reference_env;
  DtrainProcess reference = reference_env.run({"submit", reference_env.write_spec("ref.yaml", trainer_spec("ref", kSteps))});
  REQUIRE_MESSAGE(reference.exit_code == 0, reference.err());
  std::string expected = final_line(read_text(reference_env.run_dirs().at(0) + "/ranks/0.log"));
  REQUIRE(!expected.empty());

  DtrainEnv env;
  // Paced (rank 0 works 10 ms more a step, and rank 1 waits for it in the all-reduce) so that the
  // run is still training when the preemption comes: unpaced, 400 steps can be over before the
  // test has seen step 50 in state.json. A sleep changes no numbers.
  env.environment.emplace_back("DTRAIN_FAULT_SLOW_RANK", "0:10");
  DtrainProcess run = env.start({"submit", env.write_spec("job.yaml", trainer_spec("preempt", kSteps))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE_MESSAGE(wait_until([&] { return rank_field(dir, 0, "step") > 50 && rank_field(dir, 1, "step") > 50; }, 60'000),
                  run.err());
  preempt(env, run, run_id);
  REQUIRE(run.wait(60'000));
  CHECK_MESSAGE(run.exit_code == 6, run.err());
  nlohmann::json state = state_of(dir);
  CHECK(state["state"] == "preempted");
  CHECK(state["exit_code"] == 6);

  auto events = read_events(dir + "/events.jsonl");
  auto requested = events_named(events, "checkpoint.requested");
  REQUIRE(requested.size() == 1);
  CHECK_MESSAGE(requested[0]["reason"].get<std::string>().find(why) != std::string::npos, requested[0].dump());
  CHECK(requested[0]["ranks"] == 2);
  auto committed = events_named(events, "checkpoint.committed");
  REQUIRE(committed.size() == 1);
  int64_t step = committed[0]["step"].get<int64_t>();
  CHECK(step >= requested[0]["step"].get<int64_t>());
  for (const char* rank : {"0", "1"}) {
    CHECK_MESSAGE(read_text(dir + "/ranks/" + rank + ".log")
                          .find("saving step " + std::to_string(step) + " for a checkpoint request") != std::string::npos,
                  rank);
  }
  auto stop = events_named(events, "run.stop_requested");
  REQUIRE(stop.size() == 1);
  CHECK_MESSAGE(stop[0]["reason"].get<std::string>().find("checkpoint step " + std::to_string(step) +
                                                          " saved by every rank") != std::string::npos,
                stop[0].dump());
  CHECK(events_named(events, "failure.detected").empty());
  CHECK_MESSAGE(run.err().find("`dtrain resume " + run_id + "` continues from checkpoint step " + std::to_string(step)) !=
                    std::string::npos,
                run.err());
  check_nothing_left(run_id);

  DtrainProcess resumed = env.run({"resume", run_id}, 120'000);
  CHECK_MESSAGE(resumed.exit_code == 0, resumed.err());
  CHECK(resumed.err().find("it had preempted") != std::string::npos);
  auto resumes = events_named(read_events(dir + "/events.jsonl"), "run.resumed");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["previous_state"] == "preempted");
  CHECK(resumes[0]["resume_step"] == step);
  CHECK(final_line(read_text(dir + "/ranks/0.log")) == expected);
  CHECK(final_line(read_text(dir + "/ranks/1.log")) == final_line(read_text(reference_env.run_dirs().at(0) + "/ranks/1.log")));
  check_nothing_left(run_id);
}

}  // namespace

TEST_CASE("SIGTERM to dtrain-train's supervisor: both ranks save one step, the run ends preempted, resume finishes it") {
  check_trainer_preemption([](DtrainEnv&, DtrainProcess& run, const std::string&) { REQUIRE(::kill(run.pid, SIGTERM) == 0); },
                           "received SIGTERM (preemption)");
}

TEST_CASE("dtrain stop --checkpoint: the same preemption through the control socket") {
  check_trainer_preemption(
      [](DtrainEnv& env, DtrainProcess&, const std::string& run_id) {
        DtrainProcess stop = env.run({"stop", run_id, "--checkpoint"}, 90'000);
        CHECK_MESSAGE(stop.exit_code == 0, stop.err());
        CHECK(stop.err().find("after every rank saves one step") != std::string::npos);
        CHECK_MESSAGE(stop.out().find("(state preempted, exit 6)") != std::string::npos, stop.out());
      },
      "dtrain stop --checkpoint (preemption)");
}

TEST_CASE("an unmodified script gets SIGTERM with preempt_grace, not stop_grace, to save in its own handler") {
  DtrainEnv env;
  // Its SIGTERM handler takes 3 s (longer than stop_grace) to "save", then exits 0.
  write_text(env.dir.path + "/slow_save.py", R"PY(import os, signal, sys, time
rank = os.environ["RANK"]
def save(signum, frame):
    time.sleep(3)
    open("saved-" + rank, "w").write("saved")
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
print("ready", flush=True)
while True:
    time.sleep(0.1)
)PY");
  std::string spec = env.write_spec("plain.yaml",
                                    "version: 1\nname: plain\nslots_per_host: 2\n"
                                    "worker:\n  command: [python3, -u, slow_save.py]\n"
                                    "stop_grace: 1s\npreempt_grace: 20s\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] {
    return read_text(dir + "/ranks/0.log").find("ready") != std::string::npos &&
           read_text(dir + "/ranks/1.log").find("ready") != std::string::npos;
  }, 60'000));
  REQUIRE(::kill(run.pid, SIGTERM) == 0);
  REQUIRE(run.wait(60'000));
  CHECK_MESSAGE(run.exit_code == 6, run.err());
  CHECK(read_text(env.dir.path + "/saved-0") == "saved");
  CHECK(read_text(env.dir.path + "/saved-1") == "saved");
  auto events = read_events(dir + "/events.jsonl");
  auto requested = events_named(events, "checkpoint.requested");
  REQUIRE(requested.size() == 1);
  CHECK(requested[0]["ranks"] == 0);
  auto stop = events_named(events, "run.stop_requested");
  REQUIRE(stop.size() == 1);
  CHECK_MESSAGE(stop[0]["reason"].get<std::string>().find("none could be asked to save; each gets SIGTERM and 20s") !=
                    std::string::npos,
                stop[0].dump());
  for (const auto& exited : events_named(events, "worker.exited")) {
    CHECK_MESSAGE(exited["exit_code"] == 0, exited.dump());  // their handlers finished: no SIGKILL
  }
  CHECK(state_of(dir)["state"] == "preempted");
  check_nothing_left(run_id_of(dir));
}

namespace {

/// A worker that speaks the worker protocol (beats) but never saves when asked.
constexpr const char* kDeafScript = R"PY(import sys, time
sys.path.insert(0, sys.argv[1])
import dtrain_worker
w = dtrain_worker.Worker.from_env()
step = 0
while True:
    step += 1
    w.beat(step)
    w.checkpoint_requested(step)  # heard, ignored
    time.sleep(0.02)
)PY";

std::string deaf_spec(const std::string& grace) {
  return "version: 1\nname: deaf\nslots_per_host: 2\n"
         "worker:\n  command: [python3, -u, deaf.py, \"" DTRAIN_SOURCE_DIR "/worker/python\"]\n"
         "heartbeat: {interval: 100ms, timeout: 2s, hang_timeout: 10s}\n"
         "stop_grace: 1s\npreempt_grace: " + grace + "\n";
}

}  // namespace

TEST_CASE("a checkpoint that never comes: the run stops after preempt_grace and says none was saved") {
  DtrainEnv env;
  write_text(env.dir.path + "/deaf.py", kDeafScript);
  DtrainProcess run = env.start({"submit", env.write_spec("deaf.yaml", deaf_spec("2s"))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return rank_field(dir, 0, "step") > 5 && rank_field(dir, 1, "step") > 5; }, 60'000));
  REQUIRE(::kill(run.pid, SIGTERM) == 0);
  REQUIRE(run.wait(60'000));
  CHECK_MESSAGE(run.exit_code == 6, run.err());
  auto events = read_events(dir + "/events.jsonl");
  auto requested = events_named(events, "checkpoint.requested");
  REQUIRE(requested.size() == 1);
  CHECK(requested[0]["ranks"] == 2);
  auto stop = events_named(events, "run.stop_requested");
  REQUIRE(stop.size() == 1);
  CHECK_MESSAGE(stop[0]["reason"].get<std::string>().find("was not complete within 2s (preempt_grace); no checkpoint is "
                                                          "complete") != std::string::npos,
                stop[0].dump());
  CHECK(run.err().find("continues from the start (no checkpoint)") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("a second SIGTERM cuts a preemption's wait short and kills the workers") {
  DtrainEnv env;
  write_text(env.dir.path + "/deaf.py", kDeafScript);
  DtrainProcess run = env.start({"submit", env.write_spec("deaf.yaml", deaf_spec("10m"))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return rank_field(dir, 0, "step") > 5 && rank_field(dir, 1, "step") > 5; }, 60'000));
  REQUIRE(::kill(run.pid, SIGTERM) == 0);
  REQUIRE(wait_until([&] { return !events_named(read_events(dir + "/events.jsonl"), "checkpoint.requested").empty(); },
                     20'000));
  REQUIRE(::kill(run.pid, SIGTERM) == 0);
  REQUIRE(run.wait(60'000));  // far sooner than the 10m grace
  CHECK_MESSAGE(run.exit_code == 6, run.err());
  auto stop = events_named(read_events(dir + "/events.jsonl"), "run.stop_requested");
  REQUIRE(stop.size() == 1);
  CHECK_MESSAGE(stop[0]["reason"].get<std::string>().find("was cut short (received SIGTERM again)") != std::string::npos,
                stop[0].dump());
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("an instrumented PyTorch DDP script saves the asked step on SIGTERM and resumes from it") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  // Saves only when asked (no interval): rank 0 writes step-S.pt after every rank reached S,
  // then tells dtrain it is committed. At start it loads DTRAIN_RESUME_STEP's file if set.
  write_text(env.dir.path + "/ddp.py", R"PY(import os, sys, time
sys.path.insert(0, sys.argv[1])
import torch, torch.nn as nn, torch.distributed as dist
import dtrain_worker
torch.set_num_threads(1)
steps = int(sys.argv[2])
w = dtrain_worker.Worker.from_env()
torch.manual_seed(0)
model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
w.init_process_group(backend="gloo")
ddp = nn.parallel.DistributedDataParallel(model)
rank = dist.get_rank()
ckpt_dir = os.environ["DTRAIN_CKPT_DIR"]
start = int(os.environ.get("DTRAIN_RESUME_STEP", "-1"))
if start >= 0:
    state = torch.load(os.path.join(ckpt_dir, "step-%d.pt" % start))
    model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])
    print("resumed from step %d" % start, flush=True)
saved = False
for step in range(max(start, 0) + 1, steps + 1):
    g = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(8, 16, generator=g)
    loss = ddp(x).pow(2).mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    w.beat(step, loss=float(loss))
    # A rank may hear the request a step late: the ranks agree (MAX) to save where the first did.
    asked = torch.tensor([1 if w.checkpoint_requested(step) and not saved else 0])
    dist.all_reduce(asked, op=dist.ReduceOp.MAX)
    if asked.item() and not saved:
        saved = True
        t0 = time.monotonic()
        print("saving step %d (%s)" % (step, w.checkpoint_reason or "a peer heard it first"), flush=True)
        dist.barrier()
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            path = os.path.join(ckpt_dir, "step-%d.pt" % step)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
            w.checkpoint_committed(step, os.path.getsize(path), (time.monotonic() - t0) * 1000)
        dist.barrier()
    time.sleep(0.01)
print("final step %d weight %.6f" % (steps, float(model.weight.sum())), flush=True)
w.close()
)PY");
  auto spec = [&](const std::string& name) {
    return env.write_spec(name + ".yaml", "version: 1\nname: " + name + "\nslots_per_host: 2\n"
                                          "worker:\n  command: [/usr/bin/python3, -u, ddp.py, \"" DTRAIN_SOURCE_DIR
                                          "/worker/python\", \"600\"]\n"
                                          "heartbeat: {interval: 100ms, timeout: 5s, hang_timeout: 30s}\n"
                                          "stop_grace: 5s\npreempt_grace: 30s\n");
  };
  DtrainProcess run = env.start({"submit", spec("ddp")});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE_MESSAGE(wait_until([&] { return rank_field(dir, 0, "step") > 20 && rank_field(dir, 1, "step") > 20; }, 120'000),
                  run.err());
  REQUIRE(::kill(run.pid, SIGTERM) == 0);
  REQUIRE(run.wait(90'000));
  CHECK_MESSAGE(run.exit_code == 6, run.err());
  auto committed = events_named(read_events(dir + "/events.jsonl"), "checkpoint.committed");
  REQUIRE_MESSAGE(committed.size() == 1, run.err() << read_text(dir + "/ranks/0.log") << read_text(dir + "/events.jsonl"));
  int64_t step = committed[0]["step"].get<int64_t>();
  for (const char* rank : {"0", "1"}) {
    CHECK_MESSAGE(read_text(dir + "/ranks/" + rank + ".log").find("saving step " + std::to_string(step) + " (") !=
                      std::string::npos,
                  read_text(dir + "/ranks/" + rank + ".log"));
  }
  CHECK((read_text(dir + "/ranks/0.log") + read_text(dir + "/ranks/1.log")).find("(received SIGTERM (preemption))") !=
        std::string::npos);
  CHECK(state_of(dir)["state"] == "preempted");
  check_nothing_left(run_id);

  DtrainProcess resumed = env.run({"resume", run_id}, 180'000);
  CHECK_MESSAGE(resumed.exit_code == 0, resumed.err());
  std::string log = read_text(dir + "/ranks/0.log");
  CHECK_MESSAGE(log.find("resumed from step " + std::to_string(step)) != std::string::npos, log);
  CHECK(log.find("final step 600") != std::string::npos);
  check_nothing_left(run_id);
}

// The Gloo communicator's collectives (worker/runtime/gloo_communicator.cpp): its own ring
// all-reduce (every size, including fewer elements than ranks and sizes the ranks do not
// divide), the broadcast from every root, the barrier — ranks as threads over one in-process
// store, real TCP connections between them.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "worker/runtime/worker.h"

using namespace std::chrono_literals;
namespace worker = dtrain::worker;

namespace {

/// `size` connected Gloo communicators of one data-parallel world (threads of this process).
struct World {
  std::vector<std::unique_ptr<worker::Worker>> workers;
  std::vector<std::unique_ptr<worker::Communicator>> comms;

  explicit World(int size) {
    auto store = std::make_shared<worker::InProcessKv>();
    worker::Settings settings;
    settings.backend = "gloo";
    for (int rank = 0; rank < size; ++rank) {
      worker::Topology topology;
      topology.world_size = topology.dp_size = size;
      topology.rank = topology.dp_rank = rank;
      workers.push_back(worker::Worker::in_process(topology, settings, store));
    }
    comms.resize(static_cast<size_t>(size));
    std::vector<std::string> errors(static_cast<size_t>(size));
    each([&](int rank) {
      auto comm = workers[static_cast<size_t>(rank)]->connect(20s);
      if (comm) comms[static_cast<size_t>(rank)] = std::move(*comm);
      else errors[static_cast<size_t>(rank)] = comm.error().message;
    });
    for (const std::string& error : errors) REQUIRE_MESSAGE(error.empty(), error);
  }

  /// Runs `body(rank)` on every rank at once, each in its own thread.
  template <class Body>
  void each(Body body) {
    std::vector<std::thread> threads;
    for (size_t rank = 0; rank < workers.size(); ++rank) threads.emplace_back(body, static_cast<int>(rank));
    for (auto& thread : threads) thread.join();
  }
};

/// Rank r's element i: small integers, so that every sum is exact whatever its order.
double element(int rank, size_t i) { return static_cast<double>((static_cast<size_t>(rank) * 7 + i * 13) % 101); }

}  // namespace

TEST_CASE("gloo collectives: the ring all-reduce sums exactly for every world and length") {
  for (int size : {2, 3, 4, 5}) {
    World world(size);
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{100003}}) {
      std::vector<std::vector<double>> doubles(static_cast<size_t>(size));
      std::vector<std::vector<float>> floats(static_cast<size_t>(size));
      std::vector<std::string> errors(static_cast<size_t>(size));
      world.each([&](int rank) {
        auto& d = doubles[static_cast<size_t>(rank)];
        auto& f = floats[static_cast<size_t>(rank)];
        for (size_t i = 0; i < count; ++i) {
          d.push_back(element(rank, i));
          f.push_back(static_cast<float>(element(rank, i)));
        }
        auto comm = world.comms[static_cast<size_t>(rank)].get();
        if (auto summed = comm->allreduce_sum(d.data(), d.size(), 20s); !summed) {
          errors[static_cast<size_t>(rank)] = summed.error().message;
        } else if (auto summed_floats = comm->allreduce_sum(f.data(), f.size(), 20s); !summed_floats) {
          errors[static_cast<size_t>(rank)] = summed_floats.error().message;
        }
      });
      for (const std::string& error : errors) REQUIRE_MESSAGE(error.empty(), error);
      for (int rank = 0; rank < size; ++rank) {
        INFO("world " << size << ", " << count << " elements, rank " << rank);
        for (size_t i = 0; i < count; ++i) {
          double expected = 0;
          for (int peer = 0; peer < size; ++peer) expected += element(peer, i);
          REQUIRE(doubles[static_cast<size_t>(rank)][i] == expected);
          REQUIRE(floats[static_cast<size_t>(rank)][i] == static_cast<float>(expected));
        }
      }
    }
  }
}

TEST_CASE("gloo collectives: every rank ends the all-reduce with the same bits, step after step") {
  // Inexact sums: what data parallelism needs is that every replica applies the same gradient.
  World world(4);
  constexpr size_t kCount = 50021;
  std::vector<std::vector<double>> values(4);
  std::vector<std::string> errors(4);
  world.each([&](int rank) {
    std::mt19937_64 random(static_cast<uint64_t>(rank) + 1);
    std::uniform_real_distribution<double> uniform(-1, 1);
    auto& mine = values[static_cast<size_t>(rank)];
    mine.resize(kCount);
    for (int step = 0; step < 5 && errors[static_cast<size_t>(rank)].empty(); ++step) {
      for (double& value : mine) value = value * 0.5 + uniform(random);
      if (auto summed = world.comms[static_cast<size_t>(rank)]->allreduce_sum(mine.data(), mine.size(), 20s); !summed) {
        errors[static_cast<size_t>(rank)] = summed.error().message;
      }
    }
  });
  for (const std::string& error : errors) REQUIRE_MESSAGE(error.empty(), error);
  for (int rank = 1; rank < 4; ++rank) {
    CHECK(std::memcmp(values[0].data(), values[static_cast<size_t>(rank)].data(), kCount * sizeof(double)) == 0);
  }
}

TEST_CASE("gloo collectives: broadcast from every root, and a barrier") {
  World world(3);
  for (int root = 0; root < 3; ++root) {
    std::vector<std::vector<uint8_t>> buffers(3, std::vector<uint8_t>(300001));
    std::vector<std::string> errors(3);
    world.each([&](int rank) {
      auto& mine = buffers[static_cast<size_t>(rank)];
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(rank));
      auto comm = world.comms[static_cast<size_t>(rank)].get();
      if (auto sent = comm->broadcast(mine.data(), mine.size(), root, 20s); !sent) {
        errors[static_cast<size_t>(rank)] = sent.error().message;
      } else if (auto met = comm->barrier(20s); !met) {
        errors[static_cast<size_t>(rank)] = met.error().message;
      }
    });
    for (const std::string& error : errors) REQUIRE_MESSAGE(error.empty(), error);
    for (int rank = 0; rank < 3; ++rank) {
      INFO("root " << root << ", rank " << rank);
      CHECK(buffers[static_cast<size_t>(rank)] == buffers[static_cast<size_t>(root)]);
    }
  }
}

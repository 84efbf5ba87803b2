// Data-parallel training on synthetic data: every rank holds its own shard of a regression problem
// (y = x . w_true + noise), computes the gradient of a small two-layer MLP on its shard, the gradients are
// averaged with all_reduce(AVG), and every rank applies the same SGD step, so the replicas stay identical.
// Rank 0 prints the global loss, which falls. Exits 1 if it does not, or if the replicas diverge.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../example_util.hpp"

namespace {

constexpr int kIn = 16;
constexpr int kHidden = 32;
constexpr int kSamples = 256;  // per rank
constexpr int kSteps = 200;
constexpr float kLr = 0.05f;

struct Model {
  // Parameters in one flat vector so a single all_reduce moves every gradient.
  std::vector<float> p;
  Model() : p(kHidden * kIn + kHidden + kHidden + 1) {}
  float* w1() { return p.data(); }
  float* b1() { return p.data() + kHidden * kIn; }
  float* w2() { return b1() + kHidden; }
  float* b2() { return w2() + kHidden; }
};

// Mean squared error on the shard; accumulates d(loss)/d(p) into grad.
float loss_and_grad(Model& m, const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& grad) {
  Model g;
  float loss = 0;
  float h[kHidden];
  for (int s = 0; s < kSamples; ++s) {
    const float* xs = &x[static_cast<std::size_t>(s) * kIn];
    float out = *m.b2();
    for (int j = 0; j < kHidden; ++j) {
      float a = m.b1()[j];
      for (int i = 0; i < kIn; ++i) a += m.w1()[j * kIn + i] * xs[i];
      h[j] = a > 0 ? a : 0;  // ReLU
      out += m.w2()[j] * h[j];
    }
    const float err = out - y[static_cast<std::size_t>(s)];
    loss += err * err / kSamples;
    const float dout = 2 * err / kSamples;
    *g.b2() += dout;
    for (int j = 0; j < kHidden; ++j) {
      g.w2()[j] += dout * h[j];
      if (h[j] <= 0) continue;
      const float dh = dout * m.w2()[j];
      g.b1()[j] += dh;
      for (int i = 0; i < kIn; ++i) g.w1()[j * kIn + i] += dh * xs[i];
    }
  }
  grad = g.p;
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();

  // The same true weights everywhere; each rank's samples come from its own seed (its data shard).
  std::mt19937 shared_rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(kIn);
  for (auto& w : w_true) w = normal(shared_rng);
  std::mt19937 rng(1000 + static_cast<unsigned>(rank));
  std::vector<float> x(static_cast<std::size_t>(kSamples) * kIn);
  std::vector<float> y(kSamples);
  for (int s = 0; s < kSamples; ++s) {
    float dot = 0;
    for (int i = 0; i < kIn; ++i) {
      x[static_cast<std::size_t>(s) * kIn + i] = normal(rng);
      dot += w_true[static_cast<std::size_t>(i)] * x[static_cast<std::size_t>(s) * kIn + i];
    }
    y[static_cast<std::size_t>(s)] = dot + 0.01f * normal(rng);
  }

  // Random init on rank 0, broadcast so every replica starts identical (as DDP does).
  Model model;
  if (rank == 0) {
    std::mt19937 init_rng(7);
    std::normal_distribution<float> small(0.0f, 0.3f);
    for (auto& v : model.p) v = small(init_rng);
  }
  pg->broadcast(model.p, 0);

  std::vector<float> grad;
  float first_loss = 0;
  float last_loss = 0;
  for (int step = 0; step <= kSteps; ++step) {
    std::vector<float> loss{loss_and_grad(model, x, y, grad)};
    auto work = pg->all_reduce_async(grad, ctrun::comm::ReduceOp::kAvg);  // overlaps the loss reduction below
    pg->all_reduce(loss, ctrun::comm::ReduceOp::kAvg);
    work->wait();
    if (step == 0) first_loss = loss[0];
    last_loss = loss[0];
    if (rank == 0 && step % 20 == 0) std::printf("step %3d  loss %.5f\n", step, loss[0]);
    for (std::size_t i = 0; i < model.p.size(); ++i) model.p[i] -= kLr * grad[i];
  }
  // Replicas must be identical: max and min of every parameter agree.
  std::vector<float> hi = model.p;
  std::vector<float> lo = model.p;
  pg->all_reduce(hi, ctrun::comm::ReduceOp::kMax);
  pg->all_reduce(lo, ctrun::comm::ReduceOp::kMin);
  for (std::size_t i = 0; i < hi.size(); ++i) {
    EXAMPLE_CHECK(hi[i] == lo[i], "rank %d: replicas diverged at parameter %zu", rank, i);
  }
  EXAMPLE_CHECK(last_loss < first_loss * 0.2f, "loss did not fall enough: %f -> %f", first_loss, last_loss);
  if (rank == 0) {
    std::printf("trained on %d ranks x %d samples: loss %.4f -> %.5f, replicas identical\n", pg->size(), kSamples,
                first_loss, last_loss);
  }
  return 0;
}

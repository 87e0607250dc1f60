// kernels_train_demo: the issue-3 acceptance run. Trains LeNet-5 on
// Fashion-MNIST (SGD momentum 0.9, lr 0.05, batch 64, 3 epochs by default),
// prints progress and per-epoch results, and exits 1 when the final test
// accuracy is below --min-accuracy (default 0.86).
//
//   kernels_train_demo [--model lenet5] [--epochs 3] [--threads 0] [--batch 64]
//                      [--lr 0.05] [--data DIR] [--min-accuracy 0.86] [--save FILE] [--seed 1]
//                      [--schedule constant|step|cosine]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/trainer.hpp"

using namespace hetflow::kernels;

int main(int argc, char** argv) {
  train_config c;
  c.model = "lenet5";
  c.epochs = 3;
  c.batch_size = 64;
  c.optimizer = {optimizer_kind::sgd, 0.05, 0.9};
  c.progress_every = 200;
  double min_acc = 0.86;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--model") c.model = v;
    else if (a == "--epochs") c.epochs = std::atoi(v);
    else if (a == "--threads") c.threads = std::atoi(v);
    else if (a == "--batch") c.batch_size = std::atoll(v);
    else if (a == "--lr") c.optimizer.lr = std::atof(v);
    else if (a == "--data") c.data.path = v;
    else if (a == "--min-accuracy") min_acc = std::atof(v);
    else if (a == "--save") c.save_weights = v;
    else if (a == "--seed") c.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--schedule") {
      std::string k = v;
      if (k == "constant") c.schedule.kind = lr_schedule_kind::constant;
      else if (k == "cosine") c.schedule.kind = lr_schedule_kind::cosine;
      else if (k == "step") c.schedule.kind = lr_schedule_kind::step;
      else {
        std::fprintf(stderr, "--schedule: constant, step or cosine\n");
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto rep = train_single(c, [](const train_progress& p) {
    std::printf("epoch %d step %lld/%lld  %.0f samples/s  loss %.4f\n", p.epoch, (long long)p.step,
                (long long)p.steps_per_epoch, p.samples_per_s, p.loss);
    std::fflush(stdout);
  });
  if (!rep) {
    std::fprintf(stderr, "kernels_train_demo: %s\n", rep.error().to_string().c_str());
    return 1;
  }
  std::printf("%s on %s, %d threads, %lld parameters\n", rep->model.c_str(), rep->where.c_str(), rep->threads,
              (long long)rep->parameters);
  for (const auto& e : rep->epochs)
    std::printf("epoch %d: loss %.4f  train acc %.4f  test acc %.4f  %.0f samples/s  %.2f s\n", e.epoch, e.loss,
                e.train_accuracy, e.test_accuracy, e.samples_per_s, e.train_seconds);
  std::printf("total %.2f s\n", rep->total_seconds);
  double acc = rep->epochs.back().test_accuracy;
  if (acc < min_acc) {
    std::fprintf(stderr, "FAIL: test accuracy %.4f < %.4f\n", acc, min_acc);
    return 1;
  }
  std::printf("PASS: test accuracy %.4f >= %.4f\n", acc, min_acc);
  return 0;
}

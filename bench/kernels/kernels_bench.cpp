// hetflow side of bench/kernels/run.sh: trains a zoo model on Fashion-MNIST
// with train_single and prints training images/s and test accuracy, with the
// same recipe as torch_bench.py (normalised inputs, SGD momentum 0.9,
// lr 0.05, shuffled epochs, last partial batch dropped).
//
//   kernels_bench --model lenet5 --batch 64 --threads 1 [--epochs 1]
//                 [--max-steps 0] [--data DIR] [--json]
//
// Like hetflow's nodes it runs libgomp passive unless OMP_WAIT_POLICY or
// GOMP_SPINCOUNT is set (kernels/cpu/omp_policy.hpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_context.hpp"
#include "kernels/cpu/omp_policy.hpp"
#include "kernels/trainer.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

int main(int argc, char** argv) {
  if (auto why = kernels::cpu::reexec_with_passive_omp_wait(argv); !why.empty())
    std::fprintf(stderr, "kernels_bench: OpenMP wait policy left at libgomp's default: %s\n", why.c_str());
  train_config c;
  c.model = "lenet5";
  c.batch_size = 64;
  c.threads = 1;
  c.epochs = 1;
  c.drop_last = true;
  c.eval_each_epoch = false;
  c.optimizer = {optimizer_kind::sgd, 0.05, 0.9};
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") c.model = next();
    else if (a == "--width") c.width = std::atof(next());
    else if (a == "--batch") c.batch_size = std::atoll(next());
    else if (a == "--threads") c.threads = std::atoi(next());
    else if (a == "--epochs") c.epochs = std::atoi(next());
    else if (a == "--max-steps") c.max_steps_per_epoch = std::atoll(next());
    else if (a == "--lr") c.optimizer.lr = std::atof(next());
    else if (a == "--seed") c.seed = std::strtoull(next(), nullptr, 10);
    else if (a == "--data") c.data.path = next();
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "usage: %s [--model NAME] [--width X] [--batch N] [--threads N] [--epochs N] [--max-steps N] "
                           "[--lr X] [--seed N] [--data DIR] [--json]\n", argv[0]);
      return 2;
    }
  }
  auto rep = train_single(c);
  if (!rep) {
    std::fprintf(stderr, "kernels_bench: %s\n", rep.error().to_string().c_str());
    return 1;
  }
  double samples = 0, seconds = 0;
  for (const auto& e : rep->epochs) {
    samples += double(e.samples);
    seconds += e.train_seconds;
  }
  const auto& last = rep->epochs.back();
  double ips = seconds > 0 ? samples / seconds : 0;
  if (json)
    std::printf("{\"framework\": \"hetflow\", \"model\": \"%s\", \"batch\": %lld, \"threads\": %d, "
                "\"images_per_s\": %.1f, \"test_accuracy\": %.4f, \"final_loss\": %.4f, \"train_seconds\": %.3f, "
                "\"isa\": \"%s\"}\n",
                c.model.c_str(), (long long)c.batch_size, rep->threads, ips, last.test_accuracy, last.loss, seconds,
                cpu::cpu_context::isa_name().c_str());
  else
    std::printf("hetflow %s batch %lld threads %d: %.0f images/s, test accuracy %.4f, loss %.4f\n", c.model.c_str(),
                (long long)c.batch_size, rep->threads, ips, last.test_accuracy, last.loss);
  return 0;
}

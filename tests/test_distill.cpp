// Distillation (Ops::lm_head_distill, ctrl train --teacher): the fused loss
// against finite differences and a double-precision reference, α = 0 as
// plain training bit for bit, zero KL for a student distilled from itself,
// bit-exact resume with a teacher, mixed precision, any student shape, and
// the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "data/shard.h"
#include "model/model.h"
#include "test_support.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace ctrl;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, double sd = 1.0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(sd * random_normal(seed, 23, i));
  return v;
}

// The op's inputs on the host (the CPU reference takes host pointers).
struct HeadCase {
  int64_t N, D, Dt, V, chunk;
  float alpha, tau, grad_scale;
  std::vector<int32_t> targets;
  std::vector<float> h, w, b, th, tw, tb;
  HeadCase(int64_t n, int64_t d, int64_t dt, int64_t v, int64_t c, float a, float t)
      : N(n), D(d), Dt(dt), V(v), chunk(c), alpha(a), tau(t), grad_scale(0.37f) {
    for (int64_t r = 0; r < N; ++r) targets.push_back(r % 4 == 1 ? -1 : int32_t((r * 7 + 3) % V));
    h = randn(size_t(N * D), 1), w = randn(size_t(V * D), 2, 0.7), b = randn(size_t(V), 3, 0.5);
    th = randn(size_t(N * Dt), 4), tw = randn(size_t(V * Dt), 5, 0.7), tb = randn(size_t(V), 6, 0.5);
  }
  // Runs the op; returns {Σ ce, Σ kl}. dh, dw, db may be null (loss only).
  std::pair<double, double> run(Ops& ops, float* dh, float* dw, float* db) {
    std::vector<float> scratch(size_t(chunk * head_row_stride(V))), tscratch(scratch.size());
    TeacherHead t{th.data(), tw.data(), tb.data(), Dt, tscratch.data()};
    double ce = 0, kl = 0;
    ops.lm_head_distill(h.data(), w.data(), b.data(), targets.data(), t, N, D, V, alpha, tau, grad_scale, dh, dw, db,
                        &ce, &kl, scratch.data(), chunk);
    return {ce, kl};
  }
  double objective(Ops& ops) {
    const auto [ce, kl] = run(ops, nullptr, nullptr, nullptr);
    return double(grad_scale) * ((1 - double(alpha)) * ce + double(alpha) * double(tau) * double(tau) * kl);
  }
  // Σ ce and Σ kl in double from the explicit logits.
  std::pair<double, double> reference() const {
    double ce = 0, kl = 0;
    for (int64_t r = 0; r < N; ++r) {
      if (targets[size_t(r)] < 0) continue;
      std::vector<double> z(static_cast<size_t>(V)), u(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) {
        z[size_t(v)] = b[size_t(v)], u[size_t(v)] = tb[size_t(v)];
        for (int64_t c = 0; c < D; ++c) z[size_t(v)] += double(h[size_t(r * D + c)]) * w[size_t(v * D + c)];
        for (int64_t c = 0; c < Dt; ++c) u[size_t(v)] += double(th[size_t(r * Dt + c)]) * tw[size_t(v * Dt + c)];
      }
      auto lse = [&](const std::vector<double>& x, double s) {
        double m = -1e300, sum = 0;
        for (double e : x) m = std::max(m, e / s);
        for (double e : x) sum += std::exp(e / s - m);
        return m + std::log(sum);
      };
      ce += lse(z, 1) - z[size_t(targets[size_t(r)])];
      const double lz = lse(z, tau), lu = lse(u, tau);
      for (int64_t v = 0; v < V; ++v) {
        const double lp = u[size_t(v)] / tau - lu, lq = z[size_t(v)] / tau - lz;
        kl += std::exp(lp) * (lp - lq);
      }
    }
    return {ce, kl};
  }
};

// The `kl` of every logged step of a run, in order.
std::vector<double> logged_kl(const std::string& run_dir) {
  std::ifstream metrics(run_dir + "/metrics.jsonl");
  std::string line;
  std::vector<double> kl;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("kl")) kl.push_back(j["kl"].get<double>());
  }
  return kl;
}

// max |numeric − analytic| over `indices` against the largest |analytic| (the gradient's scale).
void expect_gradient(float* x, const std::vector<float>& analytic, const std::function<double()>& f,
                     const std::vector<size_t>& indices, const char* what) {
  double scale = 0, err = 0;
  for (float g : analytic) scale = std::max(scale, double(std::abs(g)));
  for (size_t i : indices)
    err = std::max(err, std::abs(test_support::central_difference(x, i, 1e-2f, f) - double(analytic[i])));
  EXPECT_GT(scale, 0.0) << what;
  EXPECT_LT(err, 2e-3 * scale) << what << ": error " << err << " against gradient scale " << scale;
}

std::vector<size_t> all(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(DistillLoss, GradientsMatchFiniteDifferences) {
  auto ops = test_support::make_cpu_reference();
  for (float alpha : {0.3f, 1.0f}) {
    HeadCase k(7, 6, 5, 9, 3, alpha, 2.0f);  // chunks of 3, 3 and 1 rows; the teacher narrower than the student
    std::vector<float> dh(size_t(k.N * k.D), 1e3f), dw(size_t(k.V * k.D), 0.0f), db(size_t(k.V), 0.0f);
    k.run(*ops, dh.data(), dw.data(), db.data());
    auto f = [&] { return k.objective(*ops); };
    expect_gradient(k.h.data(), dh, f, all(dh.size()), "dh");
    expect_gradient(k.w.data(), dw, f, all(dw.size()), "dw");
    expect_gradient(k.b.data(), db, f, all(db.size()), "db");
    for (int64_t r = 0; r < k.N; ++r) {  // ignored rows: no gradient
      if (k.targets[size_t(r)] >= 0) continue;
      for (int64_t c = 0; c < k.D; ++c) EXPECT_EQ(dh[size_t(r * k.D + c)], 0.0f);
    }
    // Nothing flows to the teacher: its inputs are read only.
    HeadCase fresh(7, 6, 5, 9, 3, alpha, 2.0f);
    EXPECT_EQ(k.th, fresh.th);
    EXPECT_EQ(k.tw, fresh.tw);
  }
}

TEST(DistillLoss, LossesMatchADoubleReferenceAcrossVocabularyBlocks) {
  auto ops = test_support::make_cpu_reference();
  for (float tau : {1.0f, 2.0f, 4.5f}) {
    HeadCase k(11, 8, 12, 2085, 4, 0.5f, tau);  // one full block of 2048 and a partial one
    const auto [ce, kl] = k.run(*ops, nullptr, nullptr, nullptr);
    const auto [ce_ref, kl_ref] = k.reference();
    EXPECT_NEAR(ce, ce_ref, 1e-4 * std::abs(ce_ref)) << tau;
    EXPECT_NEAR(kl, kl_ref, 1e-4 * std::abs(kl_ref) + 1e-6) << tau;
    EXPECT_GT(kl, 0.0);
  }
}

TEST(DistillLoss, AlphaZeroIsLmHeadLossBitForBitAndATeacherEqualToTheStudentHasZeroKl) {
  auto ops = test_support::make_cpu_reference();
  HeadCase k(9, 8, 8, 2085, 4, 0.0f, 2.0f);
  std::vector<float> dh(size_t(k.N * k.D)), dw(size_t(k.V * k.D), 0.0f), db(size_t(k.V), 0.0f);
  const auto [ce, kl] = k.run(*ops, dh.data(), dw.data(), db.data());
  std::vector<float> dh2(dh.size()), dw2(dw.size(), 0.0f), db2(db.size(), 0.0f);
  std::vector<float> scratch(size_t(k.chunk * head_row_stride(k.V)));
  double ce2 = 0;
  ops->lm_head_loss(k.h.data(), k.w.data(), k.b.data(), k.targets.data(), k.N, k.D, k.V, k.grad_scale, dh2.data(),
                    dw2.data(), db2.data(), &ce2, nullptr, scratch.data(), k.chunk);
  EXPECT_EQ(ce, ce2);
  EXPECT_EQ(dh, dh2);
  EXPECT_EQ(dw, dw2);
  EXPECT_EQ(db, db2);
  EXPECT_GT(kl, 0.0) << "the KL is still measured at alpha 0";
  // The teacher is the student: KL 0, and at α = 1 no gradient at all.
  k.th = k.h, k.tw = k.w, k.tb = k.b, k.alpha = 1.0f;
  std::fill(dw.begin(), dw.end(), 0.0f);
  std::fill(db.begin(), db.end(), 0.0f);
  const auto [ce3, kl3] = k.run(*ops, dh.data(), dw.data(), db.data());
  EXPECT_EQ(ce3, ce);
  EXPECT_NEAR(kl3, 0.0, 1e-9);
  for (float g : dh) EXPECT_NEAR(g, 0.0f, 1e-7f);
  for (float g : db) EXPECT_NEAR(g, 0.0f, 1e-7f);
}

// ---- Training with a teacher.

std::string fresh_dir(const std::string& name) { return test_support::fresh_dir("ctrl_distill", name); }

Config tiny_config(int64_t steps) {
  Config c = load_config("tiny");
  for (const char* s : {"model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.n_head=2",
                        "model.d_ff=64", "model.n_ctx=16", "train.micro_batch=2", "train.global_batch=4",
                        "train.eval_every=0", "train.checkpoint_every=3", "train.warmup_steps=2", "train.lr=0.01",
                        "train.log_every=1"})
    apply_override(c, s);
  c.train.steps = steps;
  return c;
}

// A teacher: the tiny config trained for a few steps on synthetic tokens; returns its checkpoint.
std::string train_teacher(const std::string& name, int64_t steps, Config c = tiny_config(0)) {
  c.train.steps = steps;
  c.train.checkpoint_every = 0;
  TrainerOptions o{fresh_dir(name), false, true};
  Trainer(c, o).run();
  return checkpoint_path(o.run_dir, steps);
}

std::vector<float> params(Trainer& t) { return t.model().params.to_host(); }

TEST(Distill, AlphaZeroEqualsPlainTrainingBitForBit) {
  const std::string teacher = train_teacher("teacher_a0", 4);
  Config student = tiny_config(5);
  student.model.n_layer = 1, student.model.d_model = 16;  // lighter than the teacher
  TrainerOptions plain_o{fresh_dir("plain"), false, true};
  Trainer plain(student, plain_o);
  plain.run();
  Config distilled = student;
  distilled.train.teacher = teacher;
  distilled.train.distill_alpha = 0;
  TrainerOptions distilled_o{fresh_dir("alpha0"), false, true};
  Trainer d(distilled, distilled_o);
  d.run();
  EXPECT_EQ(d.step_losses(), plain.step_losses());
  EXPECT_EQ(params(d), params(plain));
  // The KL is measured and logged all the same.
  std::ifstream metrics(distilled_o.run_dir + "/metrics.jsonl");
  const auto first = nlohmann::json::parse([&] {
    std::string line;
    std::getline(metrics, line);
    return line;
  }());
  EXPECT_GT(first.at("kl").get<double>(), 0.0);
  EXPECT_EQ(first.at("objective").get<double>(), first.at("loss").get<double>());
}

TEST(Distill, AStudentDistilledFromItselfHasZeroKlAtStepZero) {
  Config c = tiny_config(3);
  c.model.embd_pdrop = c.model.resid_pdrop = 0;  // the teacher runs without dropout: so must its copy
  const std::string teacher = train_teacher("self", 0, c);  // the initial weights, as the student starts
  c.train.teacher = teacher;
  c.train.distill_alpha = 0.5;
  TrainerOptions o{fresh_dir("self_student"), false, true};
  Trainer(c, o).run();
  const std::vector<double> kl = logged_kl(o.run_dir);
  ASSERT_EQ(kl.size(), 3u);
  EXPECT_EQ(kl[0], 0.0) << "step 1's loss is measured with the step-0 weights, which are the teacher's";
  EXPECT_GT(kl[2], 0.0) << "after an update the student differs from the teacher";
}

// A one-layer student of `teacher`, weighted away from the defaults (alpha 0.7, tau 3).
Config weighted_student(const std::string& teacher, int64_t steps) {
  Config c = tiny_config(steps);
  c.model.n_layer = 1;
  c.train.teacher = teacher;
  c.train.distill_alpha = 0.7;
  c.train.distill_temperature = 3;
  return c;
}

TEST(Distill, ResumeWithATeacherIsBitExact) {
  const Config c = weighted_student(train_teacher("teacher_resume", 4), 6);
  test_support::expect_resume_bit_exact(c, 3, fresh_dir("whole"), fresh_dir("parts"), "with a teacher");
  // A resume that leaves out the teacher keeps the run's (from its config.json), weighting included.
  test_support::expect_resume_bit_exact(c, 3, fresh_dir("whole_again"), fresh_dir("parts_no_teacher"),
                                        "resumed without --teacher", {}, [](Config& resumed) {
                                          resumed.train.teacher.clear();
                                          resumed.train.distill_alpha = 0.5;
                                          resumed.train.distill_temperature = 2;
                                        });
}

// A resume that keeps the run's teacher goes on with distillation settings
// given now (they were silently replaced by the run's), with the run's when
// none are given; on a run trained without a teacher they are refused.
TEST(Distill, AResumeKeepsTheTeacherAndTakesTheWeightingGivenNow) {
  const Config c = weighted_student(train_teacher("teacher_weighting", 2), 2);
  const std::string run = fresh_dir("weighting");
  Trainer(c, TrainerOptions{run, false, true}).run();
  auto setting_in_config_json = [&](const char* key) {
    const auto j = nlohmann::json::parse(read_file(run + "/config.json"));
    return std::stod(j.at(key).get<std::string>());
  };
  Config resumed = c;
  resumed.train.teacher.clear();
  resumed.train.steps = 3;
  resumed.train.distill_alpha = 0.9;
  TrainerOptions given{run, true, true};
  given.distill_alpha_given = true;  // the temperature was not given: the run's 3 stays
  { Trainer t(resumed, given); }
  EXPECT_DOUBLE_EQ(setting_in_config_json("train.distill_alpha"), 0.9);
  EXPECT_DOUBLE_EQ(setting_in_config_json("train.distill_temperature"), 3);
  resumed.train.distill_alpha = 0.5;  // the default, not given: the run's
  { Trainer t(resumed, TrainerOptions{run, true, true}); }
  EXPECT_DOUBLE_EQ(setting_in_config_json("train.distill_alpha"), 0.9);
  // A run without a teacher.
  Config plain = tiny_config(2);
  plain.model.n_layer = 1;
  const std::string plain_run = fresh_dir("weighting_plain");
  Trainer(plain, TrainerOptions{plain_run, false, true}).run();
  plain.train.steps = 3;
  TrainerOptions o{plain_run, true, true};
  o.distill_temperature_given = true;
  EXPECT_NE(
      test_support::error_of([&] { Trainer(plain, o); }).find("config.json names no teacher; pass --teacher CKPT"),
      std::string::npos);
}

// Two corpora of the same codes listed in another order (--source in
// another order) share the codes: name for name, id for id.
TEST(Distill, CodesInAnotherOrderAreTheSameCodes) {
  const std::string data = fresh_dir("order_ab"), reordered = fresh_dir("order_ba");
  test_support::write_two_code_corpus(data, std::vector<uint32_t>(200, 7), std::vector<uint32_t>(200, 9), 64);
  test_support::write_two_code_corpus(reordered, std::vector<uint32_t>(200, 7), std::vector<uint32_t>(200, 9), 64);
  Manifest m = Manifest::read(reordered);
  std::reverse(m.codes.begin(), m.codes.end());
  m.write(reordered);
  Config c = tiny_config(0);
  c.train.data = data;
  const std::string teacher = train_teacher("teacher_order", 1, c);
  Config student = tiny_config(1);
  student.train.data = reordered;
  student.train.teacher = teacher;
  EXPECT_NO_THROW(Trainer(student, TrainerOptions{fresh_dir("student_order"), false, true}).run());
}

// Mixed precision with a teacher: the teacher runs in the student's
// precision (its bf16 copy of the weights, or fp16 under the loss scale), and
// the objective's two parts track the fp32 run's; fp16's scaler never skips
// a step here. Training never writes the teacher's checkpoint, resumed or not.
TEST(Distill, MixedPrecisionTracksFp32AndTheTeacherIsNeverWritten) {
  const std::string teacher = train_teacher("teacher_mixed", 6);
  const std::string teacher_bytes = read_file(teacher);
  Config c = tiny_config(8);
  c.model.n_layer = 1;
  c.train.teacher = teacher;
  c.train.distill_alpha = 0.6;
  std::string fp16_dir;
  auto run = [&](const std::string& precision, const std::string& dir) {
    Config p = c;
    p.train.precision = precision;
    TrainerOptions o{fresh_dir(dir), false, true};
    if (precision == "fp16") fp16_dir = o.run_dir;
    Trainer t(p, o);
    t.run();
    return std::make_pair(t.step_losses(), logged_kl(o.run_dir));
  };
  const auto [loss32, kl32] = run("fp32", "mixed_fp32");
  ASSERT_EQ(kl32.size(), 8u);
  for (const std::string precision : {"bf16", "fp16"}) {
    const auto [loss, kl] = run(precision, "mixed_" + precision);
    ASSERT_EQ(loss.size(), loss32.size());
    const double tolerance = precision == "bf16" ? 0.02 : 0.002;  // relative: bf16 keeps 8 bits, fp16 11
    for (size_t i = 0; i < loss.size(); ++i) {
      EXPECT_NEAR(loss[i], loss32[i], tolerance * loss32[i]) << precision << " step " << i + 1;
      EXPECT_NEAR(kl[i], kl32[i], tolerance * loss32[i]) << precision << " step " << i + 1;
    }
    EXPECT_GT(kl.back(), 0.0);
  }
  std::ifstream metrics(fp16_dir + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(metrics, line)) last = line;
  EXPECT_EQ(nlohmann::json::parse(last).at("skipped_steps").get<int64_t>(), 0);
  // Resume with the teacher, then the teacher's file is byte for byte what it was.
  TrainerOptions parts{fresh_dir("mixed_resume"), false, true};
  Config first = c;
  first.train.steps = 4;
  Trainer(first, parts).run();
  parts.resume = true;
  Trainer(c, parts).run();
  EXPECT_EQ(read_file(teacher), teacher_bytes);
}

TEST(Distill, AnyStudentShapeLearnsTheTeachersDistribution) {
  const std::string teacher = train_teacher("teacher_shapes", 20);
  for (const std::vector<std::string>& sets :
       std::vector<std::vector<std::string>>{{"model.sharing=all", "model.n_layer=3"},
                                             {"model.embedding_dim=8", "model.d_model=24", "model.n_head=3"},
                                             {"model.sharing=ffn", "model.recompute=cheap", "train.precision=bf16"}}) {
    Config c = tiny_config(30);
    for (const auto& s : sets) apply_override(c, s);
    c.model.embd_pdrop = c.model.resid_pdrop = 0;
    c.train.teacher = teacher;
    c.train.distill_alpha = 1;  // the teacher's softened distribution alone
    TrainerOptions o{fresh_dir("shape"), false, true};
    Trainer(c, o).run();
    const std::vector<double> kl = logged_kl(o.run_dir);
    ASSERT_EQ(kl.size(), 30u);
    EXPECT_LT(kl.back(), 0.5 * kl.front()) << sets[0] << ": the student moves toward the teacher";
    std::filesystem::remove_all(o.run_dir);
  }
}

TEST(Distill, RefusesATeacherThatSharesNeitherTokensNorCodes) {
  const std::string teacher = train_teacher("teacher_refuse", 1);
  auto message = [&](Config c) {
    c.train.teacher = teacher;
    try {
      TrainerOptions o{fresh_dir("refused"), false, true};
      Trainer t(c, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Config c = tiny_config(1);
  c.model.vocab_size = 65;
  EXPECT_NE(message(c).find("the teacher's model.vocab_size is 64 and the student's 65"), std::string::npos)
      << message(c);
  EXPECT_NE(message(c).find("(--set model.vocab_size=64, with the teacher's tokenizer)"), std::string::npos)
      << message(c);
  c = tiny_config(1);
  c.model.n_ctx = 32;
  EXPECT_NE(message(c).find("shorter than the student's"), std::string::npos) << message(c);
  // ctrl plan refuses the same teacher (it planned memory for one train would refuse).
  const std::string planned = test_support::error_of([&] {
    Config p = c;
    p.train.teacher = teacher;
    teacher_of(p);
  });
  EXPECT_NE(planned.find("ctrl plan --teacher " + teacher + ": the teacher's context is"), std::string::npos)
      << planned;
  // A run directory is not a teacher: its newest checkpoint would change under a resume.
  const std::string run_dir = teacher.substr(0, teacher.find("/checkpoints/"));
  c = tiny_config(1);
  c.train.teacher = run_dir;
  const std::string directory = test_support::error_of([&] {
    Trainer(c, TrainerOptions{fresh_dir("dir"), false, true});
  });
  EXPECT_NE(directory.find(run_dir + " is a directory; pass a checkpoint file (its newest: " + teacher + ")"),
            std::string::npos)
      << directory;
  // A corpus of two codes against a teacher trained on synthetic tokens (one code, "Synthetic").
  const std::string data = fresh_dir("corpus");
  test_support::write_two_code_corpus(data, std::vector<uint32_t>(200, 7), std::vector<uint32_t>(200, 9), 64);
  c = tiny_config(1);
  c.train.data = data;
  c.train.teacher = teacher;
  const std::string student = fresh_dir("student");
  const std::string codes = test_support::error_of([&] { Trainer(c, TrainerOptions{student, false, true}); });
  EXPECT_NE(codes.find("student and teacher must share the control codes"), std::string::npos) << codes;
  EXPECT_FALSE(std::filesystem::exists(student)) << "a refused teacher left a run directory";
  // The command line: distillation settings without a teacher.
  for (const char* setting : {" --distill-alpha 0.3", " --set train.distill_temperature=5"}) {
    std::string out;
    EXPECT_NE(
        test_support::run_shell(
            test_support::ctrl_binary() + " train --config tiny --out " + fresh_dir("cli") + setting + " 2>&1", &out),
        0);
    EXPECT_NE(out.find("(train.distill_alpha, train.distill_temperature) need a teacher (--teacher CKPT)"),
              std::string::npos)
        << setting << ": " << out;
  }
  c = tiny_config(1);
  c.train.teacher = "/nonexistent/teacher.ckpt";
  try {
    Trainer(c, TrainerOptions{fresh_dir("missing"), false, true});
    ADD_FAILURE() << "a missing teacher is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.teacher (the distillation teacher): /nonexistent/teacher.ckpt"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

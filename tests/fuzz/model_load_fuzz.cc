// Every core model loader (t-NEB, gHHC, hierarchical PPCA) on damaged model
// directories, and through them the artifact layer they share
// (core/io/model_artifact.h: manifest fields, array shapes and dtypes). At
// start-up each method fits a tiny model and saves it (with every optional
// file: t-NEB standardised, gHHC projected); each input then picks one file
// of one saved model (first byte, indexing the files of all three models in
// order, each model's sorted by name: make_corpus.py relies on this order)
// and replaces it with the rest of the input, or with a mutation of the
// valid file when the second byte says so, and the loader runs on the copy.
// A corrupt model must be an error, never a crash, a sanitizer report or a
// huge allocation.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/hppca/hppca.h"
#include "core/tneb/tneb.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace fs = std::filesystem;
using dendro::fuzz::Check;

struct Template {
  std::string dir;                                 // the saved model
  std::vector<std::string> files;                  // its file names
  std::vector<std::string> contents;               // and their bytes
  std::function<void(const std::string&)> load;    // runs the loader
};

std::vector<Template>* templates = nullptr;
std::string* root_dir = nullptr;
std::string work_dir;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Points on a few well-separated blobs, row-major.
std::vector<float> Blobs(int n, int d, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n) * d);
  uint32_t s = seed;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  };
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) x[static_cast<size_t>(i) * d + j] = 0.3f * next() + 3.0f * (i % 3 == j % 3);
  }
  return x;
}

Template Capture(const std::string& dir, std::function<void(const std::string&)> load) {
  Template t;
  t.dir = dir;
  t.load = std::move(load);
  for (const auto& e : fs::directory_iterator(dir)) t.files.push_back(e.path().filename().string());
  std::sort(t.files.begin(), t.files.end());
  for (const std::string& f : t.files) t.contents.push_back(Slurp(fs::path(dir) / f));
  return t;
}

void Build(const std::string& root) {
  templates = new std::vector<Template>();
  dendro::NullRunContext ctx;
  const int n = 90, d = 4;
  const std::vector<float> x = Blobs(n, d, 7);
  const dendro::MatrixView view(x.data(), n, d);
  {
    dendro::TnebOptions o;
    o.components = 4;
    o.restarts = 1;
    o.standardize = true;  // writes tneb_center.npy and tneb_scale.npy
    auto r = dendro::FitTneb(view, o, ctx);
    Check(r.ok(), "t-NEB template fit");
    const std::string dir = root + "/tneb";
    fs::create_directories(dir);
    Check(dendro::SaveTnebModel(r->model, dir).ok(), "t-NEB template save");
    templates->push_back(Capture(dir, [](const std::string& p) { (void)dendro::LoadTnebModel(p); }));
  }
  {
    dendro::GhhcOptions o;
    o.internal_nodes = 8;
    o.triples = 500;
    o.projection_dim = 2;  // writes ghhc_projection.npy
    auto r = dendro::FitGhhc(view, o, ctx);
    Check(r.ok(), "gHHC template fit");
    const std::string dir = root + "/ghhc";
    fs::create_directories(dir);
    Check(dendro::SaveGhhcModel(r->model, dir).ok(), "gHHC template save");
    templates->push_back(Capture(dir, [](const std::string& p) {
      auto m = dendro::LoadGhhcModel(p);
      if (m.ok()) (void)dendro::GhhcModelTrees(*m);
    }));
  }
  {
    std::vector<int64_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = i % 6;
    dendro::HppcaOptions o;
    o.q = 2;
    o.r = 2;
    o.superclasses = 2;
    auto r = dendro::FitHppca(view, labels, o, ctx);
    Check(r.ok(), "hPPCA template fit");
    const std::string dir = root + "/hppca";
    fs::create_directories(dir);
    Check(r->Save(dir).ok(), "hPPCA template save");
    templates->push_back(Capture(dir, [](const std::string& p) { (void)dendro::HppcaModel::Load(p); }));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  root_dir = new std::string("/tmp/dendro_model_fuzz_" + std::to_string(::getpid()));
  fs::remove_all(*root_dir);
  Build(*root_dir + "/templates");
  work_dir = *root_dir + "/work";
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(*root_dir, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t total = 0;
  for (const Template& t : *templates) total += t.files.size();
  size_t pick = data[0] % total;
  const Template* chosen = nullptr;
  for (const Template& t : *templates) {
    if (pick < t.files.size()) {
      chosen = &t;
      break;
    }
    pick -= t.files.size();
  }
  const bool mutate_valid = data[1] & 1;
  const std::string payload(reinterpret_cast<const char*>(data) + 2, size - 2);
  fs::remove_all(work_dir);
  fs::create_directories(work_dir);
  for (size_t i = 0; i < chosen->files.size(); ++i) {
    std::string bytes = chosen->contents[i];
    if (i == pick) {
      if (mutate_valid) {
        // Overwrite the valid file with the payload at an offset it names.
        const size_t at = payload.empty() ? 0 : static_cast<uint8_t>(payload[0]) * 7 %
                                                    std::max<size_t>(bytes.size(), 1);
        for (size_t j = 1; j < payload.size() && at + j - 1 < bytes.size(); ++j) {
          bytes[at + j - 1] = payload[j];
        }
      } else {
        bytes = payload;
      }
    }
    std::ofstream(work_dir + "/" + chosen->files[i], std::ios::binary) << bytes;
  }
  chosen->load(work_dir);
  return 0;
}

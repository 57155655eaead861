#include "core/hppca/hppca.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/cpus.h"
#include "core/common/named_choice.h"
#include "core/common/status_macros.h"
#include "core/hierarchy/refine.h"
#include "core/hppca/half.h"
#include "core/hppca/internal.h"

namespace dendro {

using hppca_internal::ClassTable;
using hppca_internal::Progress;
using hppca_internal::ScorerBank;

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status ValidateOptionsImpl(const HppcaOptions& o, int64_t d) {
  if (o.q < 0 || o.q > d) {
    return absl::InvalidArgumentError(
        absl::StrCat("q = ", o.q, " must be in [0, d] (d = ", d, " feature columns)"));
  }
  if (o.superclasses != kFlatClassifier && (o.r < 0 || o.r > d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("r = ", o.r, " must be in [0, d] (d = ", d, " feature columns)"));
  }
  if (!(o.lambda > 0.0) || !std::isfinite(o.lambda)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lambda = ", o.lambda, " must be a finite number > 0"));
  }
  if (o.superclasses < kFlatClassifier) {
    return absl::InvalidArgumentError(absl::StrCat(
        "superclasses = ", o.superclasses, " (use >= 1, 0 for automatic or -1 for flat)"));
  }
  if (o.default_top_t < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("default_top_t = ", o.default_top_t, " must be >= 1"));
  }
  if (o.kmeans_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmeans_iterations = ", o.kmeans_iterations, " must be >= 1"));
  }
  if (o.seeding_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seeding_rank = ", o.seeding_rank, " must be >= 0 (0: all q directions)"));
  }
  if (o.kmeans_restarts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmeans_restarts = ", o.kmeans_restarts, " must be >= 1"));
  }
  if (o.raw_data_clustering && o.raw_samples_per_class < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_samples_per_class = ", o.raw_samples_per_class, " must be >= 1"));
  }
  return absl::OkStatus();
}

// S for K classes of d features; 0 = flat.
absl::StatusOr<int32_t> ResolveSuperclasses(const HppcaOptions& o, int32_t k, int64_t d) {
  if (o.superclasses == kFlatClassifier) return 0;
  if (o.superclasses == kAutoSuperclasses) {
    return ChooseHppcaSuperclasses(d, k, o.q, o.r, o.default_top_t);
  }
  if (o.superclasses > k) {
    return absl::InvalidArgumentError(absl::StrCat("superclasses = ", o.superclasses,
                                                   " exceeds the number of classes (", k, ")"));
  }
  return o.superclasses;
}

// The clustering Gaussians (ComputeClusterExcess must have run).
std::vector<GaussianRef> ClassRefs(const ClassTable& t) {
  std::vector<GaussianRef> refs;
  refs.reserve(t.size());
  for (int32_t c = 0; c < t.size(); ++c) refs.push_back(t.cluster_gaussian(c));
  return refs;
}

// Clusters the classes into S super-classes with the options' method.
absl::StatusOr<hppca_internal::KMeansResult> Cluster(
    const ClassTable& t, const HppcaOptions& o, int32_t s, bool raw,
    const hppca_internal::ClassFitResult* fit, int threads, Progress progress) {
  const std::vector<GaussianRef> refs = ClassRefs(t);
  if (raw) {
    return hppca_internal::RawDataKMeans(refs, fit->samples, fit->sample_class, s, o.r,
                                         o.kmeans_iterations, o.seed, threads, progress);
  }
  return hppca_internal::GaussianKMeans(refs, s, o.r, o.kmeans_iterations, o.kmeans_restarts,
                                        o.seeding_rank, o.seed, threads, progress);
}

// The binary16 copy of a bank's bases and the norms its screening bounds use.
void FillHalf(ScorerBank& b) {
  b.bases_half.clear();
  b.half_slack.resize(0, 0);
  b.mean_norm.clear();
  if (!hppca_internal::HalfAvailable() || b.n == 0 || b.k == 0) return;
  const int64_t rows = static_cast<int64_t>(b.n) * b.k;
  b.bases_half.resize(rows * b.d);
  hppca_internal::ToHalf(b.bases, rows * b.d, b.bases_half.data());
  b.half_slack.resize(b.n, b.k);
  const double gamma = hppca_internal::Gamma(b.d);
  std::vector<float> back(b.d);
  for (int64_t r = 0; r < rows; ++r) {
    hppca_internal::FromHalf(b.bases_half.data() + r * b.d, b.d, back.data());
    double norm2 = 0, err2 = 0;
    for (int64_t i = 0; i < b.d; ++i) {
      const double v = b.bases[r * b.d + i];
      norm2 += v * v;
      err2 += (v - back[i]) * (v - back[i]);
    }
    const double e = std::sqrt(err2);
    const float slack =
        static_cast<float>((e + 2.0 * gamma * (std::sqrt(norm2) + e)) * (1.0 + 1e-6));
    if (!std::isfinite(slack)) {
      // An entry beyond binary16's range (never so for unit eigenvectors):
      // no bound, so this bank is scored in float32 only.
      b.bases_half.clear();
      b.half_slack.resize(0, 0);
      return;
    }
    b.half_slack.data()[r] = slack;
  }
  b.mean_norm.resize(b.n);
  for (int32_t i = 0; i < b.n; ++i) b.mean_norm[i] = b.means.row(i).norm();
}

void FillBank(ScorerBank& b, const float* bases, int32_t n, int32_t k, int64_t d,
              const RowMatrixD& means_in_order, const RowMatrixD& eig_in_order,
              const Eigen::VectorXf& center, double lambda, PpcaScore score) {
  b.n = n;
  b.k = k;
  b.d = d;
  b.bases = bases;
  b.inv_lambda = 1.0 / lambda;
  b.means.resize(n, d);
  b.proj.resize(n, k);
  b.weights.resize(n, k);
  b.mean_norm2.assign(n, 0.0);
  b.offset.assign(n, 0.0);
  for (int32_t i = 0; i < n; ++i) {
    b.means.row(i) = (means_in_order.row(i).cast<float>() - center.transpose());
    const Eigen::VectorXd mc = b.means.row(i).transpose().cast<double>();
    b.mean_norm2[i] = mc.squaredNorm();
    Eigen::Map<const RowMatrixF> basis(bases + static_cast<int64_t>(i) * k * d, k, d);
    double logdet = static_cast<double>(d - k) * std::log(lambda);
    for (int32_t j = 0; j < k; ++j) {
      b.proj(i, j) = static_cast<float>(basis.row(j).cast<double>().dot(mc));
      const double e = std::max(eig_in_order(i, j), 0.0);
      b.weights(i, j) = static_cast<float>(e / (e + lambda));
      logdet += std::log(e + lambda);
    }
    if (score == PpcaScore::kLogDet) b.offset[i] = logdet;
  }
  FillHalf(b);
}

}  // namespace

int64_t hppca_internal::ScorerBank::Bytes() const {
  return static_cast<int64_t>(means.size() + proj.size() + weights.size() + half_slack.size() +
                              mean_norm.size()) *
             4 +
         static_cast<int64_t>(bases_half.size()) * 2 +
         static_cast<int64_t>(mean_norm2.size() + offset.size()) * 8;
}

absl::Status ValidateHppcaOptions(const HppcaOptions& options, int64_t d) {
  return ValidateOptionsImpl(options, d);
}

namespace {
constexpr NamedChoice<PpcaScore> kPpcaScores[] = {
    {PpcaScore::kMahalanobis, "mahalanobis"},
    {PpcaScore::kLogDet, "log_det"},
};
}  // namespace

std::string_view PpcaScoreName(PpcaScore s) { return ChoiceName(kPpcaScores, s); }

absl::StatusOr<PpcaScore> ParsePpcaScore(std::string_view name) {
  return ParseChoice(kPpcaScores, "PPCA score", name);
}

namespace {
// c(p) of the cost model: one model of p components scored for one row.
double ModelCost(int64_t d, int32_t p) {
  return (static_cast<double>(p) + 1.0) * static_cast<double>(d) + kHppcaComponentCost * p +
         kHppcaModelCost;
}
}  // namespace

HppcaPredictCost EstimateHppcaPredictCost(int64_t d, int32_t k, int32_t q, int32_t s, int32_t r,
                                          int32_t t, double classes_opened) {
  HppcaPredictCost cost;
  cost.flat = k * ModelCost(d, q);
  cost.hierarchical = s <= 0 ? cost.flat
                             : s * ModelCost(d, r) + classes_opened * ModelCost(d, q) +
                                   std::min(t, s) * (static_cast<double>(d) + kHppcaOpenCost);
  return cost;
}

int32_t ChooseHppcaSuperclasses(int64_t d, int32_t k, int32_t q, int32_t r, int32_t t) {
  // From S = T on the cost is S c(r) + T K c(q) / S + const: convex, with its
  // minimum next to sqrt(T K c(q) / c(r)). Fewer super-classes than T would
  // all be opened: no hierarchy to speak of, so S stays >= T (or K).
  const int32_t lo = std::clamp(t, 1, std::max(k, 1));
  if (k <= lo) return lo;
  const double root = std::sqrt(static_cast<double>(t) * k * ModelCost(d, q) / ModelCost(d, r));
  const int32_t below = static_cast<int32_t>(std::floor(std::clamp<double>(root, lo, k)));
  int32_t best = lo;
  double best_cost = std::numeric_limits<double>::infinity();
  for (const int32_t s : {below, std::min(below + 1, k)}) {
    const double cost =
        EstimateHppcaPredictCost(d, k, q, s, r, t, k * static_cast<double>(t) / s).hierarchical;
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

double HppcaPrediction::OperationSpeedup(int64_t num_classes, int32_t num_superclasses) const {
  if (top_t == 0 || rows == 0) return 1.0;
  double mean = 0.0;
  for (int32_t c : classes_evaluated) mean += c;
  mean /= static_cast<double>(rows);
  return static_cast<double>(num_classes) / (num_superclasses + mean);
}

// ---------------------------------------------------------------------------
// HppcaModel accessors.

HppcaModel::HppcaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HppcaModel::HppcaModel(HppcaModel&&) noexcept = default;
HppcaModel& HppcaModel::operator=(HppcaModel&&) noexcept = default;
HppcaModel::~HppcaModel() = default;

int64_t HppcaModel::dim() const { return impl_->classes.d; }
int32_t HppcaModel::num_classes() const { return impl_->classes.size(); }
int32_t HppcaModel::num_superclasses() const { return impl_->num_superclasses; }
const HppcaOptions& HppcaModel::options() const { return impl_->options; }
const HppcaFitStats& HppcaModel::fit_stats() const { return impl_->stats; }
bool HppcaModel::default_flat() const { return impl_->default_flat; }

bool HppcaModel::screens_rows() const {
  return impl_->class_bank.has_half() && impl_->super_bank.has_half();
}
HppcaPredictCost HppcaModel::predict_cost() const { return impl_->predict_cost; }
const Hierarchy& HppcaModel::hierarchy() const { return *impl_->tree; }
const Hierarchy& HppcaModel::coarse_hierarchy() const { return *impl_->coarse_tree; }
std::map<std::string, std::string>& HppcaModel::mutable_metadata() {
  return impl_->tree->mutable_metadata();
}
absl::Span<const int64_t> HppcaModel::labels() const { return impl_->classes.labels; }
int64_t HppcaModel::class_count(int32_t k) const { return impl_->classes.counts[k]; }
int32_t HppcaModel::class_rank(int32_t k) const { return impl_->classes.rank[k]; }
Eigen::Map<const Eigen::VectorXd> HppcaModel::class_mean(int32_t k) const {
  return Eigen::Map<const Eigen::VectorXd>(impl_->classes.means.row(k).data(), dim());
}
Eigen::Map<const RowMatrixF> HppcaModel::class_basis(int32_t k) const {
  const int64_t q = impl_->classes.q;
  return Eigen::Map<const RowMatrixF>(
      impl_->slot_bases.data() + static_cast<int64_t>(impl_->class_slot[k]) * q * dim(), q,
      dim());
}
Eigen::Map<const Eigen::VectorXd> HppcaModel::class_eigvals(int32_t k) const {
  return Eigen::Map<const Eigen::VectorXd>(impl_->classes.eigvals.row(k).data(),
                                           impl_->classes.q);
}
int32_t HppcaModel::superclass_of(int32_t k) const { return impl_->super_of[k]; }
GaussianRef HppcaModel::class_gaussian(int32_t k) const {
  return GaussianRef(impl_->classes.means.row(k).data(), class_basis(k).data(),
                     impl_->classes.eigvals.row(k).data(), dim(), impl_->classes.q,
                     impl_->options.lambda);
}
GaussianRef HppcaModel::class_cluster_gaussian(int32_t k) const {
  return GaussianRef(impl_->classes.means.row(k).data(), class_basis(k).data(),
                     impl_->classes.cluster_excess.row(k).data(), dim(), impl_->classes.q,
                     impl_->classes.ClusterNoise(k));
}
double HppcaModel::class_tail(int32_t k) const { return impl_->classes.tail[k]; }
absl::Span<const int32_t> HppcaModel::superclass_members(int32_t s) const {
  return impl_->members[s];
}
const Centroid& HppcaModel::superclass_centroid(int32_t s) const { return impl_->centroids[s]; }
int32_t HppcaModel::superclass_node(int32_t s) const { return impl_->super_node[s]; }
int32_t HppcaModel::superclass_coarse_node(int32_t s) const {
  return impl_->super_coarse_node[s];
}
absl::Status HppcaModel::SetClassNames(std::vector<std::string> names) {
  DENDRO_RETURN_IF_ERROR(CheckLeafNames(names, num_classes()));
  if (names.empty()) {
    return absl::InvalidArgumentError("SetClassNames: one name per class is required");
  }
  DENDRO_RETURN_IF_ERROR(impl_->coarse_tree->SetLeafNames(names));
  return impl_->tree->SetLeafNames(std::move(names));
}
int32_t HppcaModel::ClassOfLabel(int64_t label) const {
  const auto& l = impl_->classes.labels;
  auto it = std::lower_bound(l.begin(), l.end(), label);
  return it != l.end() && *it == label ? static_cast<int32_t>(it - l.begin()) : -1;
}
int64_t HppcaModel::MemoryBytes() const {
  const Impl& m = *impl_;
  int64_t b = static_cast<int64_t>(m.slot_bases.size() + m.super_bases.size()) * 4;
  b += static_cast<int64_t>(m.classes.means.size() + m.classes.eigvals.size()) * 8;
  for (const Centroid& c : m.centroids) b += c.mean.size() * 8 + c.eigvals.size() * 8;
  b += m.class_bank.Bytes() + m.super_bank.Bytes();
  return b;
}

// ---------------------------------------------------------------------------
// Assembly.

absl::StatusOr<HppcaModel> HppcaBuilder::Build(HppcaOptions options, HppcaFitStats stats,
                                               ClassTable classes, std::vector<int32_t> super_of,
                                               std::vector<Centroid> centroids,
                                               std::vector<int32_t> point_leaf) {
  auto impl = std::make_unique<HppcaModel::Impl>();
  const int32_t k = classes.size();
  const int32_t s = static_cast<int32_t>(centroids.size());
  if (super_of.empty()) super_of.assign(k, -1);
  if (static_cast<int32_t>(super_of.size()) != k) {
    return absl::InternalError("super-class assignment has the wrong length");
  }
  DENDRO_RETURN_IF_ERROR(GroupMembers(s, super_of, *impl));
  OrderSlots(k, s, *impl);
  PermuteBasesToSlots(*impl, classes);
  if (classes.cluster_excess.rows() != k || classes.lambda != options.lambda) {
    classes.ComputeClusterExcess(options.lambda);
  }
  impl->options = options;
  impl->stats = stats;
  impl->num_superclasses = s;
  impl->super_of = std::move(super_of);
  impl->centroids = std::move(centroids);
  impl->classes = std::move(classes);
  DENDRO_RETURN_IF_ERROR(FillScoringCaches(*impl));
  ChooseDefaultScoring(*impl);
  DENDRO_RETURN_IF_ERROR(BuildTrees(*impl, std::move(point_leaf)));
  return HppcaModel(std::move(impl));
}

// predict_cost and default_flat from the members' sizes and class counts.
void HppcaBuilder::ChooseDefaultScoring(HppcaModel::Impl& impl) {
  const ClassTable& t = impl.classes;
  const int32_t k = t.size(), s = impl.num_superclasses;
  const int32_t opened = std::min(impl.options.default_top_t, s);
  double classes_opened = k;
  if (s > 0) {
    double rows = 0, weighted = 0;
    for (int32_t c = 0; c < k; ++c) {
      const double own = static_cast<double>(impl.members[impl.super_of[c]].size());
      const double others = s > 1 ? (k - own) / (s - 1) : 0.0;
      const double n = static_cast<double>(std::max<int64_t>(t.counts[c], 1));
      rows += n;
      weighted += n * std::min<double>(k, own + (opened - 1) * others);
    }
    classes_opened = weighted / rows;
  }
  impl.predict_cost =
      EstimateHppcaPredictCost(t.d, k, t.q, s, impl.options.r, opened, classes_opened);
  switch (impl.options.scoring) {
    case HppcaScoring::kFlat:
      impl.default_flat = true;
      break;
    case HppcaScoring::kHierarchical:
      impl.default_flat = s == 0;
      break;
    case HppcaScoring::kAuto:
      impl.default_flat =
          s == 0 || impl.predict_cost.hierarchical >= kHppcaHierarchyShare * impl.predict_cost.flat;
      break;
  }
}

// members[j]: the classes of super-class j, in class order (none when flat,
// where every super_of entry becomes -1).
absl::Status HppcaBuilder::GroupMembers(int32_t s, std::vector<int32_t>& super_of,
                                        HppcaModel::Impl& impl) {
  const int32_t k = static_cast<int32_t>(super_of.size());
  impl.members.assign(s, {});
  for (int32_t c = 0; c < k; ++c) {
    if (s == 0) {
      super_of[c] = -1;
      continue;
    }
    if (super_of[c] < 0 || super_of[c] >= s) {
      return absl::InternalError(absl::StrCat("class ", c, " has no super-class"));
    }
    impl.members[super_of[c]].push_back(c);
  }
  for (int32_t j = 0; j < s; ++j) {
    if (impl.members[j].empty()) {
      return absl::InternalError(absl::StrCat("super-class ", j, " has no classes"));
    }
  }
  return absl::OkStatus();
}

// Slot order: the classes of super-class 0, then of 1, ...; identity when
// flat.
void HppcaBuilder::OrderSlots(int32_t k, int32_t s, HppcaModel::Impl& impl) {
  impl.slot_begin.assign(1, 0);
  if (s == 0) {
    impl.slot_class.resize(k);
    std::iota(impl.slot_class.begin(), impl.slot_class.end(), 0);
    impl.slot_begin.push_back(k);
  } else {
    for (int32_t j = 0; j < s; ++j) {
      for (int32_t c : impl.members[j]) impl.slot_class.push_back(c);
      impl.slot_begin.push_back(static_cast<int32_t>(impl.slot_class.size()));
    }
  }
  impl.class_slot.resize(k);
  for (int32_t j = 0; j < k; ++j) impl.class_slot[impl.slot_class[j]] = j;
}

// Moves `classes.bases` into impl.slot_bases, permuted into slot order in
// place (cycle by cycle): no second copy of the K q x d bases.
void HppcaBuilder::PermuteBasesToSlots(HppcaModel::Impl& impl, ClassTable& classes) {
  const int32_t k = classes.size();
  const int64_t block = static_cast<int64_t>(classes.q) * classes.d;
  std::vector<char> done(k, 0);
  std::vector<float> tmp(block);
  float* base = classes.bases.data();
  for (int32_t j = 0; j < k; ++j) {
    if (done[j] || impl.slot_class[j] == j) {
      done[j] = 1;
      continue;
    }
    std::copy(base + j * block, base + (j + 1) * block, tmp.begin());
    int32_t cur = j;
    while (true) {
      const int32_t src = impl.slot_class[cur];
      done[cur] = 1;
      if (src == j) {
        std::copy(tmp.begin(), tmp.end(), base + cur * block);
        break;
      }
      std::copy(base + src * block, base + (src + 1) * block, base + cur * block);
      cur = src;
    }
  }
  impl.slot_bases = std::move(classes.bases);
  classes.bases.resize(0, classes.d);
}

// The scorer banks of the classes (slot order) and super-classes, about the
// mean of the class means.
absl::Status HppcaBuilder::FillScoringCaches(HppcaModel::Impl& impl) {
  const ClassTable& t = impl.classes;
  const int32_t k = t.size();
  const int64_t d = t.d;
  const int32_t q = t.q;
  const int32_t s = impl.num_superclasses;
  const HppcaOptions& options = impl.options;
  impl.center = (t.means.colwise().sum() / static_cast<double>(k)).transpose().cast<float>();
  {
    RowMatrixD means_slot(k, d), eig_slot(k, q);
    for (int32_t j = 0; j < k; ++j) {
      means_slot.row(j) = t.means.row(impl.slot_class[j]);
      eig_slot.row(j) = t.eigvals.row(impl.slot_class[j]);
    }
    FillBank(impl.class_bank, impl.slot_bases.data(), k, q, d, means_slot, eig_slot, impl.center,
             options.lambda, options.score);
  }
  if (s == 0) return absl::OkStatus();
  const int32_t r = static_cast<int32_t>(impl.centroids[0].eigvals.size());
  impl.super_bases.resize(static_cast<int64_t>(s) * r, d);
  RowMatrixD means_s(s, d), eig_s(s, r);
  for (int32_t j = 0; j < s; ++j) {
    const Centroid& c = impl.centroids[j];
    if (c.eigvals.size() != r || c.mean.size() != d) {
      return absl::InternalError("super-class centroids disagree on rank or dimension");
    }
    impl.super_bases.middleRows(static_cast<int64_t>(j) * r, r) = c.eigvecs;
    means_s.row(j) = c.mean.transpose();
    eig_s.row(j) = c.eigvals.transpose();
  }
  FillBank(impl.super_bank, impl.super_bases.data(), s, r, d, means_s, eig_s, impl.center,
           options.lambda, options.score);
  return absl::OkStatus();
}

// The coarse tree (classes -> super-classes of >= 2 classes -> root) with
// its leaf names, point assignment and metadata, and its refinement to a
// binary tree.
absl::Status HppcaBuilder::BuildTrees(HppcaModel::Impl& impl, std::vector<int32_t> point_leaf) {
  const ClassTable& t = impl.classes;
  const int32_t k = t.size();
  const int64_t d = t.d;
  const int32_t s = impl.num_superclasses;
  const HppcaOptions& options = impl.options;
  std::vector<int32_t> multi;
  int32_t singles = 0;
  for (int32_t j = 0; j < s; ++j) {
    if (impl.members[j].size() >= 2) {
      multi.push_back(j);
    } else {
      ++singles;
    }
  }
  std::vector<int32_t> parent;
  std::vector<double> height(k, 0.0);
  impl.super_node.assign(s, -1);
  std::vector<int32_t> super_old_id(s, -1);
  if (s == 0 || (multi.size() == 1 && singles == 0)) {
    parent.assign(k + 1, k);
    parent[k] = -1;
    height.push_back(1.0);
    if (s == 1) super_old_id[0] = k;
  } else {
    const int32_t root = k + static_cast<int32_t>(multi.size());
    parent.assign(root + 1, root);
    parent[root] = -1;
    for (size_t i = 0; i < multi.size(); ++i) {
      const int32_t node = k + static_cast<int32_t>(i);
      super_old_id[multi[i]] = node;
      for (int32_t c : impl.members[multi[i]]) parent[c] = node;
      height.push_back(1.0);
    }
    height.push_back(2.0);
  }
  std::vector<int32_t> old_to_new;
  DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, Hierarchy::FromParents(k, parent, height, &old_to_new));
  impl.super_coarse_node.assign(s, -1);
  for (int32_t j = 0; j < s; ++j) {
    if (super_old_id[j] >= 0) impl.super_coarse_node[j] = old_to_new[super_old_id[j]];
  }
  if (!point_leaf.empty()) DENDRO_RETURN_IF_ERROR(tree.SetPointLeaf(std::move(point_leaf)));
  // Leaves are named by their class labels.
  {
    std::vector<std::string> names;
    names.reserve(k);
    for (int64_t label : t.labels) names.push_back(absl::StrCat(label));
    DENDRO_RETURN_IF_ERROR(tree.SetLeafNames(std::move(names)));
  }
  auto& md = tree.mutable_metadata();
  md["method"] = "hppca";
  md["classes"] = absl::StrCat(k);
  md["superclasses"] = absl::StrCat(s);
  md["superclasses_requested"] = absl::StrCat(options.superclasses);
  md["dim"] = absl::StrCat(d);
  md["q"] = absl::StrCat(options.q);
  md["r"] = absl::StrCat(options.r);
  md["lambda"] = absl::StrFormat("%.17g", options.lambda);
  md["score"] = std::string(PpcaScoreName(options.score));
  md["clustering"] = s == 0 ? "flat" : (options.raw_data_clustering ? "raw_data" : "gaussian");
  md["default_top_t"] = absl::StrCat(options.default_top_t);
  md["scoring"] = std::string(HppcaScoringName(options.scoring));
  md["default_scoring"] = impl.default_flat ? "flat" : "hierarchical";
  md["predict_cost_flat"] = absl::StrFormat("%.0f", impl.predict_cost.flat);
  md["predict_cost_hierarchical"] = absl::StrFormat("%.0f", impl.predict_cost.hierarchical);
  md["kmeans_iterations"] = absl::StrCat(impl.stats.kmeans_iterations);
  md["kmeans_converged"] = impl.stats.kmeans_converged ? "true" : "false";
  md["reduced_rank_classes"] = absl::StrCat(impl.stats.reduced_rank_classes);
  // The refinement: representatives are the class means (leaves) and the
  // super-class centroid means; the root's row is never read.
  std::vector<double> features(static_cast<size_t>(tree.num_nodes()) * d, 0.0);
  Eigen::Map<RowMatrixD> f(features.data(), tree.num_nodes(), d);
  f.topRows(k) = t.means;
  for (int32_t j = 0; j < s; ++j) {
    if (impl.super_coarse_node[j] >= 0) {
      f.row(impl.super_coarse_node[j]) = impl.centroids[j].mean.transpose();
    }
  }
  RefineOptions refine;
  refine.distance_name =
      "the squared Euclidean distance between class means and super-class centroid means";
  std::vector<int32_t> node_map;
  DENDRO_ASSIGN_OR_RETURN(
      Hierarchy refined,
      RefineToBinary(tree, features, d, RefineMetric::kSquaredEuclidean, refine, &node_map));
  for (int32_t j = 0; j < s; ++j) {
    if (impl.super_coarse_node[j] >= 0) impl.super_node[j] = node_map[impl.super_coarse_node[j]];
  }
  impl.tree.emplace(std::move(refined));
  impl.coarse_tree.emplace(std::move(tree));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Training.


absl::StatusOr<HppcaModel> FitHppca(const MatrixView& x, absl::Span<const int64_t> labels,
                                    const HppcaOptions& options, RunContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  DENDRO_RETURN_IF_ERROR(ValidateHppcaOptions(options, x.cols()));
  const int threads = ThreadsOrDefault(options.num_threads);
  Progress progress(ctx, 0.0, 1.0, "class models");
  HppcaFitStats stats;
  DENDRO_ASSIGN_OR_RETURN(
      hppca_internal::ClassFitResult fit,
      hppca_internal::FitClasses(x, labels, options.q,
                                 options.raw_data_clustering ? options.raw_samples_per_class : 0,
                                 options.seed, threads, progress.Sub(0.0, 0.6, "class models")));
  stats.class_seconds = Seconds(t0);
  stats.reduced_rank_classes = fit.reduced_rank_classes;
  const int32_t k = fit.table.size();
  fit.table.ComputeClusterExcess(options.lambda);
  DENDRO_ASSIGN_OR_RETURN(const int32_t s, ResolveSuperclasses(options, k, fit.table.d));
  std::vector<int32_t> super_of;
  std::vector<Centroid> centroids;
  if (s > 0) {
    const auto t1 = std::chrono::steady_clock::now();
    DENDRO_ASSIGN_OR_RETURN(hppca_internal::KMeansResult km,
                            Cluster(fit.table, options, s, options.raw_data_clustering, &fit,
                                    threads, progress.Sub(0.6, 0.98, "super-classes")));
    stats.kmeans_iterations = km.iterations;
    stats.kmeans_converged = km.converged;
    stats.reseeded_superclasses = km.reseeded;
    stats.dropped_superclasses = km.dropped;
    stats.kmeans_objective = km.objective;
    stats.seed_seconds = km.seed_seconds;
    super_of = std::move(km.assignment);
    centroids = std::move(km.centroids);
    stats.cluster_seconds = Seconds(t1);
  }
  DENDRO_RETURN_IF_ERROR(ctx.CheckCancelled());
  stats.total_seconds = Seconds(t0);
  fit.samples.resize(0, 0);
  DENDRO_ASSIGN_OR_RETURN(
      HppcaModel model,
      HppcaBuilder::Build(options, stats, std::move(fit.table), std::move(super_of),
                          std::move(centroids), std::move(fit.point_class)));
  ctx.Report(1.0, "done");
  return model;
}

absl::StatusOr<HppcaModel> AddClasses(const HppcaModel& base, const MatrixView& x,
                                      absl::Span<const int64_t> labels,
                                      const HppcaAddOptions& add, RunContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto& b = HppcaBuilder::impl(base);
  const int64_t d = base.dim();
  if (x.cols() != d) {
    return absl::InvalidArgumentError(absl::StrCat("new data have ", x.cols(),
                                                   " columns; the model expects ", d));
  }
  // New labels must be new.
  for (int64_t l : labels) {
    if (base.ClassOfLabel(l) >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", l, " is already a class of the model; AddClasses only adds new labels"));
    }
  }
  HppcaOptions options = b.options;
  const int threads = ThreadsOrDefault(add.num_threads > 0 ? add.num_threads : options.num_threads);
  Progress progress(ctx, 0.0, 1.0, "class models");
  DENDRO_ASSIGN_OR_RETURN(
      hppca_internal::ClassFitResult fit,
      hppca_internal::FitClasses(x, labels, b.classes.q, 0, options.seed, threads,
                                 progress.Sub(0.0, 0.5, "class models")));
  HppcaFitStats stats = b.stats;
  stats.class_seconds = Seconds(t0);
  stats.reduced_rank_classes += fit.reduced_rank_classes;
  const ClassTable& nt = fit.table;
  const int32_t k_old = base.num_classes(), k_new = nt.size(), k = k_old + k_new;
  const int32_t q = b.classes.q;
  // Merge into sorted label order.
  ClassTable t;
  t.d = d;
  t.q = q;
  std::vector<int32_t> old_index(k_old), new_index(k_new);
  {
    int32_t i = 0, j = 0;
    while (i < k_old || j < k_new) {
      const bool take_old =
          j >= k_new || (i < k_old && b.classes.labels[i] < nt.labels[j]);
      if (take_old) {
        old_index[i++] = static_cast<int32_t>(t.labels.size());
        t.labels.push_back(b.classes.labels[i - 1]);
      } else {
        new_index[j++] = static_cast<int32_t>(t.labels.size());
        t.labels.push_back(nt.labels[j - 1]);
      }
    }
  }
  t.counts.resize(k);
  t.rank.resize(k);
  t.tail.resize(k);
  t.means.resize(k, d);
  t.eigvals.resize(k, q);
  t.bases.resize(static_cast<int64_t>(k) * q, d);
  const int64_t block = static_cast<int64_t>(q) * d;
  for (int32_t c = 0; c < k_old; ++c) {
    const int32_t to = old_index[c];
    t.counts[to] = b.classes.counts[c];
    t.rank[to] = b.classes.rank[c];
    t.tail[to] = b.classes.tail[c];
    t.means.row(to) = b.classes.means.row(c);
    t.eigvals.row(to) = b.classes.eigvals.row(c);
    std::copy(base.class_basis(c).data(), base.class_basis(c).data() + block,
              t.bases.data() + to * block);
  }
  for (int32_t c = 0; c < k_new; ++c) {
    const int32_t to = new_index[c];
    t.counts[to] = nt.counts[c];
    t.rank[to] = nt.rank[c];
    t.tail[to] = nt.tail[c];
    t.means.row(to) = nt.means.row(c);
    t.eigvals.row(to) = nt.eigvals.row(c);
    std::copy(nt.bases.data() + c * block, nt.bases.data() + (c + 1) * block,
              t.bases.data() + to * block);
  }
  // Training-point leaves: base's re-indexed, then the new rows'.
  std::vector<int32_t> point_leaf;
  {
    const auto& old_pl = base.hierarchy().point_leaf();
    point_leaf.reserve(old_pl.size() + fit.point_class.size());
    for (int32_t c : old_pl) point_leaf.push_back(old_index[c]);
    for (int32_t c : fit.point_class) point_leaf.push_back(new_index[c]);
  }
  fit.table = ClassTable();
  t.ComputeClusterExcess(options.lambda);
  std::vector<int32_t> super_of;
  std::vector<Centroid> centroids;
  const int32_t s_old = base.num_superclasses();
  const auto t1 = std::chrono::steady_clock::now();
  if (s_old > 0 && add.recluster) {
    options.raw_data_clustering = false;  // the base's raw samples are not kept
    const HppcaOptions& o = options;
    DENDRO_ASSIGN_OR_RETURN(const int32_t s, ResolveSuperclasses(o, k, t.d));
    DENDRO_ASSIGN_OR_RETURN(hppca_internal::KMeansResult km,
                            Cluster(t, o, s, false, nullptr, threads,
                                    progress.Sub(0.5, 0.98, "super-classes")));
    stats.kmeans_iterations = km.iterations;
    stats.kmeans_converged = km.converged;
    stats.reseeded_superclasses = km.reseeded;
    stats.dropped_superclasses = 0;
    stats.kmeans_objective = km.objective;
    super_of = std::move(km.assignment);
    centroids = std::move(km.centroids);
  } else if (s_old > 0) {
    // Each new class joins its KL-nearest super-class.
    std::vector<LowRankGaussian> g(s_old);
    for (int32_t j = 0; j < s_old; ++j) g[j] = CentroidGaussian(b.centroids[j]);
    std::vector<GaussianRef> new_refs;
    for (int32_t c = 0; c < k_new; ++c) new_refs.push_back(t.cluster_gaussian(new_index[c]));
    DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> joined,
                            hppca_internal::AssignByKl(new_refs, g, threads, &ctx));
    super_of.assign(k, -1);
    for (int32_t c = 0; c < k_old; ++c) super_of[old_index[c]] = b.super_of[c];
    std::vector<char> grew(s_old, 0);
    for (int32_t c = 0; c < k_new; ++c) {
      super_of[new_index[c]] = joined[c];
      grew[joined[c]] = 1;
    }
    // Theorem 2 over all members of every super-class that gained classes.
    centroids = b.centroids;
    const std::vector<GaussianRef> refs = ClassRefs(t);
    std::vector<int32_t> todo;
    for (int32_t j = 0; j < s_old; ++j) {
      if (grew[j]) todo.push_back(j);
    }
    std::vector<absl::Status> errors(todo.size());
    DENDRO_RETURN_IF_ERROR(hppca_internal::ParallelFor(
        static_cast<int64_t>(todo.size()), threads, &ctx, [&](int64_t i) {
          const int32_t j = todo[i];
          std::vector<GaussianRef> members;
          for (int32_t c = 0; c < k; ++c) {
            if (super_of[c] == j) members.push_back(refs[c]);
          }
          auto c = TheoremTwoCentroid(members, options.r);
          if (c.ok()) {
            centroids[j] = *std::move(c);
          } else {
            errors[i] = c.status();
          }
        }));
    for (const absl::Status& e : errors) DENDRO_RETURN_IF_ERROR(e);
  }
  stats.cluster_seconds = Seconds(t1);
  DENDRO_RETURN_IF_ERROR(ctx.CheckCancelled());
  stats.total_seconds = Seconds(t0);
  DENDRO_ASSIGN_OR_RETURN(HppcaModel model,
                          HppcaBuilder::Build(options, stats, std::move(t), std::move(super_of),
                                              std::move(centroids), std::move(point_leaf)));
  // The base's classes keep their names; new ones are named by their labels.
  {
    const std::vector<std::string>& base_names = base.hierarchy().leaf_names();
    std::vector<std::string> names;
    names.reserve(model.num_classes());
    for (int64_t label : model.labels()) {
      const int32_t k = base.ClassOfLabel(label);
      names.push_back(k >= 0 && k < static_cast<int32_t>(base_names.size()) ? base_names[k]
                                                                            : absl::StrCat(label));
    }
    DENDRO_RETURN_IF_ERROR(model.SetClassNames(std::move(names)));
  }
  ctx.Report(1.0, "done");
  return model;
}

}  // namespace dendro

// dendro: command-line client for dendrod.
//
//   dendro [--server HOST:PORT] [--timeout SECONDS] VERB [ARGS...]
//
// main() parses the global flags, finds the verb and hands the rest of the
// command line to it. Errors end as one "dendro: ..." line on stderr with
// exit code 1 (2 for usage errors).
#include <grpc/support/log.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli.h"
#include "dendro/version.h"

namespace dendro::cli {
namespace {

using RunFn = absl::Status (*)(Context&, const Args&);

struct Verb {
  const char* group;  // "" for top-level verbs
  const char* name;
  const char* summary;
  std::string usage;  // shown by --help, after "usage: "; every flag with its default
  std::vector<FlagSpec> flags;
  int min_positional;
  int max_positional;
  RunFn run;
};

const FlagSpec kJson{"json", false, false};
const FlagSpec kPageSize{"page-size", true, false};
const FlagSpec kPageToken{"page-token", true, false};
const FlagSpec kAll{"all", false, false};
const FlagSpec kKey{"key", true, false};
const FlagSpec kImport{"import", true, false};
const FlagSpec kLabelsKey{"labels-key", true, false};
const FlagSpec kClassNames{"class-names", true, false};

// The input files every verb that reads data takes (core/input/matrix_file.h).
const std::string kInputFormatsHelp =
    "  Inputs: .npy (float16/32/64, any integer or bool dtype, C or Fortran order),\n"
    "  .npz, .csv/.tsv/.txt (numbers; a header line is detected). Labels: the same\n"
    "  files, or one label per line, holding integers, whole-valued floats or strings\n"
    "  (strings are class names, numbered in sorted order).\n";
const std::string kKeyHelp =
    "  --key NAME      the array of a .npz input (default: its only array)\n";
const std::string kLabelsKeyHelp =
    "  --labels-key NAME  the array of a .npz labels file (default: its only array)\n";
const std::string kInputsHelp = kInputFormatsHelp + kKeyHelp + kLabelsKeyHelp;
const std::string kImportHelp =
    "  --import MODE   auto, on or off: whether the server reads a float32 .npy file\n"
    "                  from its own disk (a server on this host started with\n"
    "                  --import_dirs over the file's directory, and the importer role)\n"
    "                  instead of receiving its bytes; auto tries it for a server on\n"
    "                  127.0.0.1, localhost, [::1] or a unix: socket and uploads when it\n"
    "                  is refused, on insists (default: auto)\n";
const std::string kClassNamesHelp =
    "  --class-names FILE  names of the label values, one per line, line v naming label v\n"
    "                  (default: string labels name themselves, numbers are named by\n"
    "                  their digits)\n";

// The flags every fit verb (l2h, tneb, ghhc) shares, for their --help.
const std::string kFitFlagsHelp =
    "  DATASET_ID      a dataset already uploaded ('dendro upload') instead of a file:\n"
    "                  nothing is uploaded and the dataset is kept\n"
    "  --dataset ID    the same as a DATASET_ID argument (default: none, a file is given)\n"
    "  --out FILE      repeatable; written by extension once the job succeeds: .npy SciPy\n"
    "                  linkage, .nwk/.newick Newick, .json the full tree with point\n"
    "                  assignments, .svg a dendrogram (see 'dendro tree --help')\n"
    "                  (default: none, only the model is kept)\n"
    "  --labels Y.npy  also upload labels and print metrics (JSON) for the fitted tree;\n"
    "                  not with a dataset, which has the labels uploaded with it\n"
    "                  (default: none, no metrics)\n"
    "  --level K       clusters for the flat metrics, with --labels (default: the number\n"
    "                  of label values)\n"
    "  --name NAME     model name (default: the file's stem, or the dataset's display\n"
    "                  name, else its id)\n"
    "  --no-wait       print the job id and exit; no outputs are written (default: wait\n"
    "                  for the job, with a progress bar on a terminal)\n"
    "  --keep-dataset  upload the input durably (default: a transient dataset, not\n"
    "                  fsynced, dropped when the server restarts or the job ends)\n"
    "  --allow-method-change  register under NAME even if its latest version was\n"
    "                  fitted with another method (default: refused)\n"
    "  --color-level K colour the clusters of the cut into K in .svg outputs (default: 0,\n"
    "                  one colour)\n"
    "  --layout L      auto, rectangular or radial, for .svg outputs (default: auto,\n"
    "                  radial above 200 leaves)\n"
    "  --json          print one JSON object instead: model, version, job, leaves,\n"
    "                  dataset (when kept), metrics (with --labels) and, for tneb, the\n"
    "                  diagnostics; with --no-wait job and dataset (default: text lines)\n";

const std::string kListFlagsHelp =
    "  --page-size N   entries per page, 1-1000 (default: 50, the server's)\n"
    "  --page-token T  the page to start from, as the previous page printed (default:\n"
    "                  the first page)\n"
    "  --all           fetch every page from there on (default: one page)\n"
    "  --json          print the response as one JSON object (default: a table)\n";

const std::string kJsonHelp = "  --json          print one JSON object (default: text lines)\n";

const std::vector<Verb>& Verbs() {
  static const auto* verbs = new std::vector<Verb>{
      {"", "upload", "upload a matrix (.npy, .npz, .csv) as a dataset",
       "dendro upload X.npy [--labels Y.npy] [--name NAME] [--transient] [--prepare l2h]\n"
       "              [--append DATASET]\n"
       "  Streams X.npy (2-D, converted to float32 block by block) to the server and\n"
       "  prints the dataset id.\n"
       "  --labels Y.npy  one label per row (default: none)\n"
       "  --name NAME     display name (default: the file name; with --append, the\n"
       "                  dataset's)\n"
       "  --append DATASET  add the rows to DATASET (ds-... for its newest generation,\n"
       "                  ds-...:G to insist on generation G being the newest) as its next\n"
       "                  generation: a new dataset id holding every row before and then\n"
       "                  these; jobs naming ds-... use the newest generation, ds-...:G a\n"
       "                  given one (default: a new dataset)\n"
       "  --transient     not written durably; dropped when the server restarts (default:\n"
       "                  durable)\n"
       "  --prepare l2h   the server computes L2H's first pass while the rows arrive, so\n"
       "                  an L2H fit of the dataset on that server starts at its merges\n"
       "                  (default: none; dendro l2h LOGITS.npy asks for it itself)\n" +
           kInputsHelp + kImportHelp,
       {kKey, kImport, kLabelsKey, {"labels", true}, {"name", true}, {"transient", false}, {"prepare",
        true}, {"append", true}},
       1, 1, RunUpload},
      {"", "l2h", "fit an L2H hierarchy to a logits matrix and fetch it",
       "dendro l2h LOGITS.npy|DATASET_ID [--out FILE ...] [--labels Y.npy]\n"
       "          [--name NAME] [--aggregation sum_of_means|mean_of_means|sum_of_sums]\n"
       "          [--level K] [--leaf-names FILE] [--warm-start REF] [--no-wait]\n"
       "          [--keep-dataset] [--allow-method-change] [--color-level K] [--layout L]\n"
       "          [--json]\n"
       "  Uploads LOGITS.npy (N x K), fits L2H, waits for the job, writes the trees asked\n"
       "  for and prints \"model NAME version V\".\n"
       "  --aggregation A how a group's cluster scores combine: sum_of_means, mean_of_means\n"
       "                  or sum_of_sums (default: sum_of_means, the paper's choice)\n"
       "  --warm-start REF  start from version NAME[:VERSION|@LABEL], fitted on an earlier\n"
       "                  generation of DATASET_ID (upload --append): its first pass over\n"
       "                  those rows is reused, the tree is the one a fit from scratch\n"
       "                  gives; --name defaults to REF's name (default: from scratch)\n"
       "  --leaf-names FILE  class names, one per line in column order; kept with the\n"
       "                  model and used by the Newick, JSON and SVG trees (default: none,\n"
       "                  leaves are named by their cluster ids)\n" +
           kFitFlagsHelp +
           kInputsHelp + kImportHelp,
       {kKey, kImport, kLabelsKey, {"labels", true}, {"name", true}, {"aggregation", true}, {"out", true,
        true},
        {"leaf-names", true}, {"warm-start", true},
        {"level", true}, {"no-wait", false}, {"keep-dataset", false}, {"dataset", true},
        {"allow-method-change", false}, kJson, {"color-level", true}, {"layout", true}},
       0, 1, RunL2h},
      {"", "tneb", "fit a t-NEB hierarchy (Student-t mixture, density paths) to embeddings",
       "dendro tneb EMBEDDINGS.npy|DATASET_ID [--out FILE ...] [--labels Y.npy]\n"
       "           [--name NAME] [--components M] [--restarts R]\n"
       "           [--standardize | --no-standardize] [--gaussian]\n"
       "           [--dof NU | --dof auto | --learn-dof] [--ridge R]\n"
       "           [--neighbors K] [--merge density|persistence|graph]\n"
       "           [--rank-restarts-by kept_log_likelihood|log_likelihood]\n"
       "           [--seed S] [--level K] [--warm-start REF] [--no-wait] [--keep-dataset]\n"
       "           [--allow-method-change] [--color-level K] [--layout L] [--json]\n"
       "  Fits the mixture, links components by maximum-density paths and merges them\n"
       "  along the maximum spanning tree. Defaults are the paper's except the merge order\n"
       "  and nu when d <= 10 (docs/methods.md).\n"
       "  --components M  mixture components (default: 25)\n"
       "  --restarts R    EM restarts, the best one kept (default: 20 when d <= 10, else\n"
       "                  4; the authors run 1 when d > 10)\n"
       "  --rank-restarts-by W\n"
       "                  kept_log_likelihood: keep the restart whose components that\n"
       "                  survive the filter fit best (beyond the paper); log_likelihood:\n"
       "                  the whole mixture's, as the authors rank them\n"
       "                  (default: kept_log_likelihood)\n"
       "  --standardize   zero mean, unit variance per feature, kept with the model and\n"
       "                  applied by 'dendro assign' (default: only when the columns'\n"
       "                  standard deviations differ by sqrt(500 d) or more, where the raw\n"
       "                  columns would leave every component too elongated to keep)\n"
       "  --no-standardize  the features as given, the paper's pipeline (default: see\n"
       "                  --standardize)\n"
       "  --gaussian      g-NEB: Gaussian components (default: Student-t)\n"
       "  --dof NU        fixed degrees of freedom (the paper: 1); 'auto' fits NU fixed at\n"
       "                  1, NU learned and Gaussian components, and keeps the lowest BIC\n"
       "                  (beyond the paper)\n"
       "                  (default: auto when the data have d <= 10 columns, 1 above)\n"
       "  --learn-dof     learn the degrees of freedom per component (default: see --dof)\n"
       "  --ridge R       added to each scale matrix (default: 1e-4)\n"
       "  --neighbors K   nearest components to link by paths (default: 10)\n"
       "  --merge M       density: the paper's merge order (decreasing min density along\n"
       "                  the path); persistence: lower peak minus saddle, increasing, so\n"
       "                  low-density tails merge first (beyond the paper); graph: the\n"
       "                  share of 10-nearest-neighbour edges between two components'\n"
       "                  rows, no paths (beyond the paper); a value given is used in\n"
       "                  every dimension (default: persistence when the data have\n"
       "                  d <= 10 columns; density above, replaced by graph when the\n"
       "                  density tree is degenerate at --level and the graph tree is\n"
       "                  not)\n"
       "  --seed S        random seed (default: 0)\n"
       "  --level K       also the cut the model's diagnostics describe (cluster sizes, the\n"
       "                  largest one's share, whether the tree is degenerate there), with\n"
       "                  or without --labels; --json prints them as \"diagnostics\", and a\n"
       "                  degenerate cut is a warning on stderr (default: the auto k)\n"
       "  --warm-start REF  start from version NAME[:VERSION|@LABEL], fitted on an earlier\n"
       "                  generation of DATASET_ID (upload --append): one EM run from its\n"
       "                  mixture and standardisation instead of restarts from k-means;\n"
       "                  finds no more components than it kept; --name defaults to\n"
       "                  REF's name (default: from scratch)\n" +
           kFitFlagsHelp +
           kInputsHelp + kImportHelp,
       {kKey, kImport, kLabelsKey, {"labels", true}, {"name", true}, {"out", true, true}, {"level", true},
        {"no-wait", false}, {"keep-dataset", false}, {"dataset", true},
        {"allow-method-change", false}, {"components", true}, {"restarts", true},
        {"standardize", false}, {"no-standardize", false}, {"gaussian", false}, {"seed", true},
        {"dof", true},
        {"learn-dof", false}, {"ridge", true}, {"neighbors", true}, {"merge", true},
        {"rank-restarts-by", true}, {"warm-start", true}, kJson,
        {"color-level", true}, {"layout", true}},
       0, 1, RunTneb},
      {"", "ghhc", "fit a gHHC tree (hyperbolic, gradient-based) to embeddings",
       "dendro ghhc EMBEDDINGS.npy|DATASET_ID [--out FILE ...] [--labels Y.npy]\n"
       "           [--name NAME] [--internal-nodes M] [--triples T] [--seed S] [--level K]\n"
       "           [--no-wait] [--keep-dataset] [--allow-method-change]\n"
       "           [--projection-dim P] [--projection pca|random]\n"
       "           [--no-center] [--learning-rate X] [--batch-size B] [--neighbors K]\n"
       "           [--margin G] [--margin-every N] [--no-margin] [--link sigmoid|softplus]\n"
       "           [--learn-points] [--point-learning-rate X] [--no-gumbel]\n"
       "           [--validation-triples V] [--constant-step-size]\n"
       "           [--points fixed|learned|auto] [--standardize auto|on|off]\n"
       "           [--tree ward|nodes] [--warm-start REF] [--color-level K] [--layout L] [--json]\n"
       "  Learns M internal nodes in the Poincare ball from sampled triples and extracts\n"
       "  the tree; with --labels prints dendrogram purity and the flat metrics.\n"
       "  --internal-nodes M  internal nodes learned (default: 100)\n"
       "  --triples T     triples seen in total (default: 200000)\n"
       "  --seed S        random seed (default: 1)\n"
       "  --projection-dim P  a P-dimensional ball, kept with the model for 'dendro\n"
       "                  assign' (default: 0, the data's own dimension)\n"
       "  --projection K  pca or random (seeded), with --projection-dim (default: pca)\n"
       "  --no-center     do not subtract the training mean (default: centre)\n"
       "  --learning-rate X  RSGD step size (default: 0.01)\n"
       "  --batch-size B  triples per RSGD step (default: 100)\n"
       "  --neighbors K   x_j is among the K nearest neighbours of x_i (default: 5)\n"
       "  --margin G      gamma of the margin objective (default: 0.25)\n"
       "  --margin-every N  triple batches between margin steps (default: 10)\n"
       "  --no-margin     no margin steps at all (default: margin steps on)\n"
       "  --link L        sigmoid or softplus, s() of eq. 15 (default: sigmoid)\n"
       "  --learn-points  also learn the points' embeddings by Adam, the paper's Digits\n"
       "                  setting (default: as --points says)\n"
       "  --point-learning-rate X  Adam step size, with --learn-points (default: 0.001)\n"
       "  --no-gumbel     no Gumbel noise in the LCA distributions (default: noise on)\n"
       "  --validation-triples V  held-out triples that pick the kept state; 0: keep\n"
       "                  the last state (default: 2000)\n"
       "  --constant-step-size  the learning rate as given however many triples (default:\n"
       "                  runs over 200000 triples take steps scaled by 200000 / T)\n"
       "  --points P      fixed, learned (as --learn-points) or auto: fit both and keep\n"
       "                  the one with the better held-out triple accuracy, at twice the\n"
       "                  time (default: auto up to 50000 rows when validating, else\n"
       "                  fixed)\n"
       "  --standardize S  auto, on or off: divide the columns by their standard\n"
       "                  deviations first (default: auto, when the largest is over 10x\n"
       "                  the median)\n"
       "  --tree T        ward: Ward's criterion over the leaf clusters; nodes: the tree\n"
       "                  read off the learned nodes, the paper's (default: ward)\n"
       "  --warm-start REF  start from version NAME[:VERSION|@LABEL], fitted on an earlier\n"
       "                  generation of DATASET_ID (upload --append): its nodes and\n"
       "                  preprocessing, then fewer triples, half of them anchored at the\n"
       "                  appended rows; a version with learned points is refitted from\n"
       "                  scratch; --name defaults to REF's name (default: from scratch)\n" +
           kFitFlagsHelp +
           kInputsHelp + kImportHelp,
       {kKey, kImport, kLabelsKey, {"labels", true}, {"name", true}, {"out", true, true}, {"level", true},
        {"no-wait", false}, {"keep-dataset", false}, {"dataset", true},
        {"allow-method-change", false}, {"internal-nodes", true},
        {"triples", true}, {"seed", true}, {"projection-dim", true}, {"projection", true},
        {"no-center", false},
        {"learning-rate", true}, {"batch-size", true}, {"neighbors", true}, {"margin", true},
        {"margin-every", true}, {"no-margin", false}, {"link", true},
        {"constant-step-size", false}, {"points", true}, {"standardize", true}, {"tree", true},
        {"learn-points", false}, {"point-learning-rate", true}, {"no-gumbel", false},
        {"validation-triples", true}, {"warm-start", true}, kJson, {"color-level", true},
        {"layout", true}},
       0, 1, RunGhhc},
      {"hppca", "train", "train a hierarchical PPCA classifier on labelled features",
       "dendro hppca train (FEATURES.npy LABELS.npy | DATASET_ID) --name NAME [--superclasses S]\n"
       "                   [--q Q] [--r R] [--lambda L] [--top-t T] [--log-det] [--raw-data]\n"
       "                   [--seed S] [--seeding-rank N] [--scoring HOW] [--flat]\n"
       "                   [--keep-dataset]"
       "\n"
       "                   [--allow-method-change] [--json]\n"
       "  Per-class PPCA Gaussians grouped into super-classes with their own PPCA.\n"
       "  DATASET_ID      a dataset uploaded with labels, used instead of the two files:\n"
       "                  nothing is uploaded and the dataset is kept\n"
       "  --dataset ID    the same as a DATASET_ID argument (default: none, files are given)\n"
       "  --name NAME     model name (required)\n"
       "  --superclasses S  super-classes (default: the cost model's choice, about\n"
       "                  sqrt(K * T) for K classes)\n"
       "  --q Q           components of each class's PPCA (default: min(50, d))\n"
       "  --r R           components of each super-class's PPCA (default: min(50, d))\n"
       "  --lambda L      PPCA noise variance (default: 0.01)\n"
       "  --top-t T       super-classes a prediction opens when it names none (default: 5)\n"
       "  --log-det       score with eq. 1 (default: the Theorem 1 score, eq. 7)\n"
       "  --raw-data      cluster samples of rows, not the class Gaussians (default: the\n"
       "                  Gaussians)\n"
       "  --seed S        random seed of the k-means (default: 0)\n"
       "  --seeding-rank N  directions per class the k-means++ seeding compares; -1: all\n"
       "                  q (default: 10)\n"
       "  --scoring HOW   how a prediction naming no --top-t is scored: auto (the cheaper of\n"
       "                  flat and hierarchical by the model's cost model), hierarchical or\n"
       "                  flat (default: auto)\n"
       "  --flat          no super-classes: one flat classifier (default: super-classes)\n"
       "  --keep-dataset  upload the files durably (default: a transient dataset, dropped\n"
       "                  when the job ends)\n"
       "  --allow-method-change  register under NAME even if its latest version was\n"
       "                  fitted with another method (default: refused)\n"
       "  --json          print one JSON object: model, version, job, dataset (when kept)\n"
       "                  (default: \"model NAME version V\")\n" +
           kInputsHelp + kImportHelp + kClassNamesHelp,
       {kKey, kImport, kLabelsKey, kClassNames, {"name", true}, {"superclasses", true}, {"q", true}, {"r",
        true}, {"seed", true},
        {"flat", false}, {"keep-dataset", false}, {"dataset", true},
        {"allow-method-change", false}, {"lambda", true}, {"top-t", true},
        {"log-det", false}, {"raw-data", false}, {"seeding-rank", true}, {"scoring", true},
        kJson},
       0, 2, RunHppcaTrain},
      {"hppca", "add", "add the classes of a labelled dataset to a classifier",
       "dendro hppca add NAME[:VERSION] (FEATURES.npy LABELS.npy | DATASET_ID) [--recluster]\n"
       "                 [--keep-dataset] [--allow-method-change] [--json]\n"
       "  Fits only the new classes and joins each to its nearest super-class; the result\n"
       "  is a new version of NAME.\n"
       "  DATASET_ID      a dataset uploaded with labels, used instead of the two files\n"
       "  --dataset ID    the same as a DATASET_ID argument (default: none, files are given)\n"
       "  --recluster     re-run the super-class k-means over all classes (default: keep\n"
       "                  the super-classes)\n"
       "  --keep-dataset  upload the files durably (default: a transient dataset, dropped\n"
       "                  when the job ends)\n"
       "  --allow-method-change  as for 'dendro hppca train' (default: refused)\n"
       "  --json          print one JSON object: model, version, job, dataset (when kept)\n"
       "                  (default: \"model NAME version V\")\n" +
           kInputsHelp + kImportHelp + kClassNamesHelp,
       {kKey, kImport, kLabelsKey, kClassNames, {"recluster", false}, {"keep-dataset", false}, {"dataset",
        true},
        {"allow-method-change", false}, kJson},
       1, 3, RunHppcaAdd},
      {"", "predict", "classify rows with a classifier model",
       "dendro predict --model NAME[:VERSION|@LABEL] FEATURES.npy --out PRED.npy|PRED.txt\n"
       "               [--top-t T] [--top-k K] [--flat] [--labels Y.npy]\n"
       "  Writes the predicted original labels: shape (N,), or (N, K) best first.\n"
       "  --model REF     the classifier (required)\n"
       "  --out PRED.npy  where the predictions go (required): .npy the labels, .txt or\n"
       "                  .csv the class names, one row per line (top-k comma-separated)\n"
       "  --top-t T       super-classes to open per row (default: the model's scoring, set\n"
       "                  by 'hppca train --scoring' and '--top-t')\n"
       "  --top-k K       labels per row, best first (default: 1)\n"
       "  --flat          score every class, ignoring the super-classes (default: the\n"
       "                  model's scoring)\n"
       "  --labels Y.npy  also print accuracy, classes evaluated per row, and the measured\n"
       "                  speed-up over the flat classifier on the same rows, as JSON\n"
       "                  (default: none)\n" +
           kInputsHelp,
       {kKey, kLabelsKey, {"model", true}, {"out", true}, {"top-t", true}, {"top-k", true},
        {"flat", false},
        {"labels", true}},
       1, 1, RunPredict},
      {"", "tree", "download a model's hierarchy",
       "dendro tree NAME[:VERSION|@LABEL] --out FILE [--out FILE ...] [--unrefined]\n"
       "            [--color-level K] [--layout auto|rectangular|radial]\n"
       "  gHHC and hppca trees are n-ary; they are served refined into binary merges so\n"
       "  that every cluster count is reachable (docs/methods.md).\n"
       "  --out FILE      written by extension: .npy SciPy linkage, .nwk/.newick, .json, or\n"
       "                  .svg, a dendrogram drawn with leaf names and a height axis;\n"
       "                  repeatable (required, at least one)\n"
       "  --unrefined     write the method's own n-ary tree (.json or .nwk only) (default:\n"
       "                  the binary refinement)\n"
       "  --color-level K colour the clusters of the cut into K in .svg outputs (default: 0,\n"
       "                  one colour)\n"
       "  --layout L      auto, rectangular or radial, for .svg outputs (default: auto,\n"
       "                  radial above 200 leaves)\n",
       {{"out", true, true}, {"unrefined", false}, {"color-level", true}, {"layout", true}},
       1, 1, RunTree},
      {"", "assign", "assign new rows to a model's clusters",
       "dendro assign --model NAME[:VERSION|@LABEL] INPUT.npy [--level K] [--stable-ids]\n"
       "              --out A.npy\n"
       "  Writes one int32 per row of INPUT.npy (int64 with --stable-ids).\n"
       "  --model REF     the model (required)\n"
       "  --out A.npy     where the assignments go (required)\n"
       "  --level K       give each row its cluster when the hierarchy is cut into K\n"
       "                  clusters (default: its leaf-cluster id)\n"
       "  --stable-ids    answer in stable cluster ids, which a cluster keeps from one\n"
       "                  version of the model to the next (default: off, clusters\n"
       "                  numbered 0 .. K-1 in this version)\n" +
           kInputFormatsHelp + kKeyHelp,
       {kKey, {"model", true}, {"level", true}, {"out", true}, {"stable-ids", false}},
       1, 1, RunAssign},
      {"", "eval", "score a hierarchy against true labels",
       "dendro eval TREE --labels Y.npy [--assignments A.npy] [--level K]\n"
       "  Prints NMI, ARI, ACC, leaf purity (at K clusters), dendrogram purity and LHD as\n"
       "  JSON. TREE is a file, read locally: .json as 'dendro tree' writes it, .nwk/.newick,\n"
       "  or a SciPy linkage .npy; or a model NAME[:VERSION|@LABEL], whose tree the server\n"
       "  sends. A tree without point assignments whose leaves are the points (a linkage\n"
       "  of the rows) is scored as such.\n"
       "  --labels Y.npy  the true label of each point (required)\n"
       "  --assignments A.npy  leaf-cluster id per point, as 'dendro assign' writes without\n"
       "                  --level (default: the training points' leaves in TREE.json)\n"
       "  --level K       clusters for the flat metrics (default: the number of label\n"
       "                  values)\n" +
           kInputFormatsHelp + kLabelsKeyHelp,
       {kLabelsKey, {"labels", true}, {"assignments", true}, {"level", true}},
       1, 1, RunEval},
      {"", "diff", "compare two hierarchies: RF, cophenetic correlation, ARI, cluster events",
       "dendro diff A B [--json] [--out FILE.svg]\n"
       "  Compares two trees over the leaves they share (matched by name when both have\n"
       "  leaf names, else by leaf id): Robinson-Foulds distance (rooted clusters, also\n"
       "  normalised), cophenetic correlation, the ARI of the two cuts at every k both\n"
       "  reach (over the points when both trees carry the same points' assignments),\n"
       "  and which clusters stayed, moved, split, merged, are new or gone\n"
       "  (docs/methods.md). A and B are each a file, read locally (.json as 'dendro\n"
       "  tree' writes it, .nwk/.newick, or a SciPy linkage .npy), or a model\n"
       "  NAME[:VERSION|@LABEL], whose tree the server sends.\n"
       "  --json          print the full report as one JSON object (default: a summary\n"
       "                  with the largest changes)\n"
       "  --out FILE.svg  also write a tanglegram: A and B facing each other, shared leaves\n"
       "                  joined, with crossings reduced (default: none)\n",
       {kJson, {"out", true}},
       2, 2, RunDiff},
      {"jobs", "list", "list jobs, the most recently submitted first",
       "dendro jobs list [--state S[,S...]] [--limit N] [--oldest-first] [--page-size N]\n"
       "                 [--page-token T] [--all] [--json]\n"
       "  --state S       only jobs in these states: queued, running, succeeded, failed,\n"
       "                  cancelled (default: every state)\n"
       "  --limit N       the first N jobs, over as many pages as that takes (default: one\n"
       "                  page)\n"
       "  --oldest-first  the first submitted first (default: the latest first)\n" +
           kListFlagsHelp,
       {{"state", true}, {"limit", true}, {"oldest-first", false}, kPageSize, kPageToken, kAll,
        kJson},
       0, 0, RunJobsList},
      {"jobs", "get", "show a job", "dendro jobs get JOB_ID [--json]\n" + kJsonHelp, {kJson}, 1,
       1, RunJobsGet},
      {"jobs", "cancel", "cancel a queued or running job",
       "dendro jobs cancel JOB_ID [--json]\n" + kJsonHelp, {kJson}, 1, 1, RunJobsCancel},
      {"jobs", "watch", "follow a job until it finishes",
       "dendro jobs watch JOB_ID\n"
       "  Prints a line per update (a progress bar on a terminal); exits 1 if the job fails.\n",
       {}, 1, 1, RunJobsWatch},
      {"jobs", "delete", "delete a finished job's record (its model stays)",
       "dendro jobs delete JOB_ID\n", {}, 1, 1, RunJobsDelete},
      {"models", "list", "list models",
       "dendro models list [--name NAME] [--page-size N] [--page-token T] [--all] [--json]\n"
       "  --name NAME     only the versions of this model (default: every model)\n" +
           kListFlagsHelp,
       {{"name", true}, kPageSize, kPageToken, kAll, kJson}, 0, 0, RunModelsList},
      {"models", "get", "show a model",
       "dendro models get NAME[:VERSION|@LABEL] [--json]\n" + kJsonHelp, {kJson}, 1, 1,
       RunModelsGet},
      {"models", "delete", "delete one version, or every version, of a model",
       "dendro models delete NAME[:VERSION]\n"
       "  Without :VERSION every version of NAME is deleted (and its labels). A version\n"
       "  a label points at is kept until the label is moved or removed.\n",
       {}, 1, 1, RunModelsDelete},
      {"models", "label", "point a label (e.g. stable) at a version: NAME@LABEL",
       "dendro models label NAME VERSION|latest LABEL [--json]\n"
       "  Points LABEL at that version (moving it if it points elsewhere). Use NAME@LABEL\n"
       "  wherever NAME:VERSION is accepted. A label is 1-64 letters, digits, '.', '_' or\n"
       "  '-', starting with a letter.\n" +
           kJsonHelp,
       {kJson}, 3, 3, RunModelsLabel},
      {"models", "unlabel", "remove a label from a model",
       "dendro models unlabel NAME LABEL\n", {}, 2, 2, RunModelsUnlabel},
      {"models", "retain", "keep only the newest N unlabelled versions of a model",
       "dendro models retain NAME N\n"
       "  From now on (and at once) versions of NAME beyond the newest N unlabelled ones\n"
       "  are deleted; labelled versions are always kept. N = 0 keeps every version.\n",
       {}, 2, 2, RunModelsRetain},
      {"datasets", "list", "list datasets",
       "dendro datasets list [--page-size N] [--page-token T] [--all] [--json]\n" +
           kListFlagsHelp,
       {kPageSize, kPageToken, kAll, kJson}, 0, 0, RunDatasetsList},
      {"datasets", "get", "show a dataset",
       "dendro datasets get DATASET [--json]\n"
       "  DATASET: an id, ds-... (its newest generation after appends) or ds-...:G\n" +
           kJsonHelp,
       {kJson}, 1, 1, RunDatasetsGet},
      {"datasets", "delete", "delete a dataset",
       "dendro datasets delete DATASET\n"
       "  DATASET: an id or ds-...:G; deletes that one generation, the others stay\n",
       {}, 1, 1, RunDatasetsDelete},
      {"keys", "hash", "print the keys-file line for a key read from stdin",
       "dendro keys hash NAME ROLE < key\n"
       "  Reads the key from stdin's first line (at least 16 characters). ROLE is reader,\n"
       "  writer or admin. The line holds the key's SHA-256, never the key.\n"
       "  --append KEYS_FILE   add the line to that file instead, as 'keys new' does\n"
       "                       (default: print it)\n",
       {{"append", true}}, 2, 2, RunKeysHash},
      {"keys", "new", "make a random key; print it, then its keys-file line",
       "dendro keys new NAME ROLE [--append KEYS_FILE]\n"
       "  Line 1 (stdout): the key, for the client. Line 2: the line for dendrod --auth_keys.\n"
       "  --append KEYS_FILE   add the line to that file instead (created 0600, replaced\n"
       "                       atomically) and print only the key; a name keeps one role;\n"
       "                       then 'kill -HUP' dendrod (default: print both lines)\n",
       {{"append", true}}, 2, 2, RunKeysNew},
      {"certs", "new", "make a private CA, a server certificate and client certificates",
       "dendro certs new --ca-dir DIR [--host NAME]... [--client NAME]... [--days N]\n"
       "                 [--role ROLE [--append KEYS_FILE]]\n"
       "  DIR/ca.pem and ca.key are the CA: made on first use (valid 10 years), reused after.\n"
       "  Keys are P-256 ECDSA, written 0600; existing server or client files are kept.\n"
       "  --ca-dir DIR         where the CA and certificates are kept (required)\n"
       "  --host NAME          repeatable: DIR/server.pem and server.key, every NAME (DNS name\n"
       "                       or IP address) a subjectAltName: the names clients dial\n"
       "                       (default: no server certificate)\n"
       "  --client NAME        repeatable: DIR/NAME.pem and NAME.key, common name NAME, for\n"
       "                       mutual TLS (dendrod --tls_client_ca DIR/ca.pem) (default: none)\n"
       "  --days N             validity of the server and client certificates (default: 365)\n"
       "  --role ROLE          reader, writer, importer or admin: the role in each client's keys-file\n"
       "                       line (default: the line says ROLE, for you to fill in)\n"
       "  --append KEYS_FILE   add those lines to the keys file (default: print them)\n",
       {{"ca-dir", true}, {"host", true, true}, {"client", true, true}, {"days", true},
        {"role", true}, {"append", true}},
       0, 0, RunCertsNew},
      {"", "health", "check that the server answers (grpc.health.v1; needs no key)",
       "dendro health\n", {}, 0, 0, RunHealth},
  };
  return *verbs;
}

constexpr char kGlobalHelp[] =
    "global flags (before or after the verb):\n"
    "  --server TARGET     dendrod address: HOST:PORT or a gRPC target such as\n"
    "                      dns:///dendrod-headless:50051 or ipv4:10.0.0.1:50051,10.0.0.2:50051;\n"
    "                      calls are spread over every address (default: $DENDRO_SERVER,\n"
    "                      else 127.0.0.1:50051)\n"
    "  --timeout SECONDS   deadline of each call to the server (default: 60)\n"
    "  --tls               connect with TLS, checking the server against the system roots\n"
    "                      (default: plaintext, unless another --tls* flag is given)\n"
    "  --tls-ca FILE       connect with TLS, checking the server against this PEM CA\n"
    "                      (default: the system roots)\n"
    "  --tls-cert FILE     client certificate (PEM) for servers that require one; needs\n"
    "                      --tls-key (default: none)\n"
    "  --tls-key FILE      the client certificate's private key (default: none)\n"
    "  --api-key-file FILE read the API key from FILE's first line; there is no flag taking\n"
    "                      the key itself, since the command line is visible to ps\n"
    "                      (default: $DENDRO_API_KEY, else no key)\n";

void PrintMainHelp() {
  std::cout << "usage: dendro [--server HOST:PORT] [--timeout SECONDS] [--tls | --tls-ca FILE]\n"
               "              [--tls-cert FILE --tls-key FILE] [--api-key-file FILE]\n"
               "              VERB [ARGS...]\n\n"
               "verbs:\n";
  for (const Verb& v : Verbs()) {
    const std::string name = std::string(v.group) + (*v.group ? " " : "") + v.name;
    std::cout << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ')
              << v.summary << "\n";
  }
  std::cout << "\nshell completion:\n"
               "  completion bash   print a bash completion script of every verb and flag\n"
               "                    (load it with: source <(dendro completion bash))\n";
  std::cout << "\n" << kGlobalHelp
            << "  --version           print the version and git revision, then exit\n"
               "\nRun 'dendro VERB --help' for a verb's flags and their defaults.\n";
}

void PrintGroupHelp(const std::string& group) {
  std::cout << "usage: dendro " << group << " SUBCOMMAND ...\n\nsubcommands:\n";
  for (const Verb& v : Verbs()) {
    if (group == v.group) {
      const std::string name = v.name;
      std::cout << "  " << name << std::string(name.size() < 10 ? 10 - name.size() : 1, ' ')
                << v.summary << "\n";
    }
  }
}

bool IsGroup(const std::string& word) {
  for (const Verb& v : Verbs()) {
    if (word == v.group) return true;
  }
  return false;
}

const Verb* FindVerb(const std::string& group, const std::string& name) {
  for (const Verb& v : Verbs()) {
    if (group == v.group && name == v.name) return &v;
  }
  return nullptr;
}

// A bash completion script generated from the verb table, so it cannot
// drift from the verbs and flags dendro accepts.
void PrintBashCompletion() {
  std::set<std::string> value_flags = {"--server", "--timeout", "--tls-ca", "--tls-cert",
                                       "--tls-key", "--api-key-file"};
  std::map<std::string, std::vector<std::string>> groups;  // group -> subcommands
  std::vector<std::string> top;
  for (const Verb& v : Verbs()) {
    if (*v.group) {
      if (groups.find(v.group) == groups.end()) top.push_back(v.group);
      groups[v.group].push_back(v.name);
    } else {
      top.push_back(v.name);
    }
    for (const FlagSpec& f : v.flags) {
      if (f.takes_value) value_flags.insert("--" + f.name);
    }
  }
  top.push_back("completion");
  std::cout << "# bash completion for dendro. Load it with: source <(dendro completion bash)\n"
               "_dendro() {\n"
               "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
               "  local globals=\"--server --timeout --tls --tls-ca --tls-cert --tls-key "
               "--api-key-file --version --help\"\n"
               "  case \" " << absl::StrJoin(value_flags, " ") << " \" in\n"
               "    *\" $prev \"*) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
               "  esac\n"
               "  local words=() i skip=0\n"
               "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
               "    local w=${COMP_WORDS[i]}\n"
               "    if ((skip)); then skip=0; continue; fi\n"
               "    case \" " << absl::StrJoin(value_flags, " ") << " \" in\n"
               "      *\" $w \"*) skip=1; continue ;;\n"
               "    esac\n"
               "    [[ $w == -* ]] || words+=(\"$w\")\n"
               "  done\n"
               "  local key=\"${words[*]:0:2}\"\n"
               "  if ((${#words[@]} == 0)); then\n"
               "    COMPREPLY=($(compgen -W \"" << absl::StrJoin(top, " ")
            << " $globals\" -- \"$cur\")); return\n"
               "  fi\n"
               "  case \"${words[0]}\" in\n";
  for (const auto& [group, subs] : groups) {
    std::cout << "    " << group << ") if ((${#words[@]} == 1)); then COMPREPLY=($(compgen -W \""
              << absl::StrJoin(subs, " ") << "\" -- \"$cur\")); return; fi ;;\n"
              << "";
  }
  std::cout << "    completion) COMPREPLY=($(compgen -W bash -- \"$cur\")); return ;;\n"
               "    *) key=${words[0]} ;;\n"
               "  esac\n"
               "  local flags=\"\"\n"
               "  case \"$key\" in\n";
  for (const Verb& v : Verbs()) {
    std::vector<std::string> flags;
    for (const FlagSpec& f : v.flags) flags.push_back("--" + f.name);
    flags.push_back("--help");
    const std::string key = *v.group ? std::string(v.group) + " " + v.name : v.name;
    std::cout << "    \"" << key << "\") flags=\"" << absl::StrJoin(flags, " ") << "\" ;;\n";
  }
  std::cout << "  esac\n"
               "  if [[ $cur == -* ]]; then\n"
               "    COMPREPLY=($(compgen -W \"$flags $globals\" -- \"$cur\"))\n"
               "  else\n"
               "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
               "  fi\n"
               "}\n"
               "complete -o filenames -F _dendro dendro\n";
}

bool IsHelp(const std::string& a) { return a == "--help" || a == "-h" || a == "help"; }

absl::Status ParseTimeout(const std::string& text, double* seconds) {
  double t = 0;
  if (!absl::SimpleAtod(text, &t) || !(t > 0) || t > 1e7) {
    return UsageError(absl::StrCat("--timeout must be a positive number of seconds, got '", text,
                                   "'"));
  }
  *seconds = t;
  return absl::OkStatus();
}

// Consumes a global flag at argv[*i] if it is one. Returns true if it did.
absl::StatusOr<bool> TakeGlobalFlag(const std::vector<std::string>& argv, size_t* i,
                                    GlobalOptions* globals) {
  const std::string& a = argv[*i];
  if (a == "--tls") {
    globals->tls = true;
    return true;
  }
  for (const char* name : {"server", "timeout", "tls-ca", "tls-cert", "tls-key", "api-key-file"}) {
    const std::string flag = std::string("--") + name;
    std::string value;
    if (a == flag) {
      if (*i + 1 >= argv.size()) return UsageError(absl::StrCat(flag, " needs a value"));
      value = argv[++*i];
    } else if (a.rfind(flag + "=", 0) == 0) {
      value = a.substr(flag.size() + 1);
    } else {
      continue;
    }
    if (std::string(name) == "server") {
      if (value.empty()) return UsageError("--server needs a HOST:PORT or gRPC target value");
      globals->server = value;
    } else if (std::string(name) == "tls-ca") {
      if (value.empty()) return UsageError("--tls-ca needs a PEM file");
      globals->tls = true;
      globals->tls_ca_file = value;
    } else if (std::string(name) == "tls-cert" || std::string(name) == "tls-key") {
      if (value.empty()) return UsageError(absl::StrCat("--", name, " needs a PEM file"));
      globals->tls = true;
      (std::string(name) == "tls-cert" ? globals->tls_cert_file : globals->tls_key_file) = value;
    } else if (std::string(name) == "api-key-file") {
      // Read when a verb connects, so offline verbs work whatever it holds.
      if (value.empty()) return UsageError("--api-key-file needs a file");
      globals->api_key_file = value;
    } else {
      absl::Status s = ParseTimeout(value, &globals->timeout_seconds);
      if (!s.ok()) return s;
    }
    return true;
  }
  return false;
}

absl::Status Main(const std::vector<std::string>& argv) {
  GlobalOptions globals;
  const char* env = std::getenv("DENDRO_SERVER");
  globals.server = (env != nullptr && *env != '\0') ? env : "127.0.0.1:50051";
  if (const char* key = std::getenv("DENDRO_API_KEY"); key != nullptr) globals.api_key = key;

  size_t i = 0;
  for (; i < argv.size(); ++i) {
    if (IsHelp(argv[i])) {
      PrintMainHelp();
      return absl::OkStatus();
    }
    if (argv[i] == "--version") {
      std::cout << "dendro " << DENDRO_VERSION << " (" << DENDRO_GIT_REVISION << ")\n";
      return absl::OkStatus();
    }
    if (argv[i] == "completion") {
      if (i + 1 >= argv.size() || argv[i + 1] != "bash") {
        return UsageError("'completion' takes one argument: bash");
      }
      PrintBashCompletion();
      return absl::OkStatus();
    }
    absl::StatusOr<bool> took = TakeGlobalFlag(argv, &i, &globals);
    if (!took.ok()) return took.status();
    if (*took) continue;
    if (!argv[i].empty() && argv[i][0] == '-') {
      return UsageError(absl::StrCat("unknown flag '", argv[i], "' (see 'dendro --help')"));
    }
    break;
  }
  if (i == argv.size()) return UsageError("no verb given (see 'dendro --help')");

  std::string group;
  std::string name = argv[i++];
  if (IsGroup(name)) {
    group = name;
    if (i == argv.size()) {
      return UsageError(absl::StrCat("'", group, "' needs a subcommand (see 'dendro ", group,
                                     " --help')"));
    }
    if (IsHelp(argv[i])) {
      PrintGroupHelp(group);
      return absl::OkStatus();
    }
    name = argv[i++];
  }
  const Verb* verb = FindVerb(group, name);
  if (verb == nullptr) {
    if (group.empty()) {
      return UsageError(absl::StrCat("unknown verb '", name, "' (see 'dendro --help')"));
    }
    return UsageError(absl::StrCat("unknown subcommand '", name, "' for '", group,
                                   "' (see 'dendro ", group, " --help')"));
  }
  const std::string full_name = group.empty() ? name : group + " " + name;

  // The verb's own arguments; global flags may also appear among them.
  std::vector<std::string> rest;
  for (; i < argv.size(); ++i) {
    if (argv[i] == "--") {
      rest.insert(rest.end(), argv.begin() + i, argv.end());
      break;
    }
    if (argv[i] == "--help" || argv[i] == "-h") {
      std::cout << "usage: " << verb->usage << "\n" << kGlobalHelp;
      return absl::OkStatus();
    }
    absl::StatusOr<bool> took = TakeGlobalFlag(argv, &i, &globals);
    if (!took.ok()) return took.status();
    if (!*took) rest.push_back(argv[i]);
  }
  absl::StatusOr<Args> args =
      Args::Parse(full_name, rest, verb->flags, verb->min_positional, verb->max_positional);
  if (!args.ok()) return args.status();
  if (globals.tls_cert_file.empty() != globals.tls_key_file.empty()) {
    return UsageError("--tls-cert and --tls-key go together: give both or neither");
  }
  Context ctx(globals);
  return verb->run(ctx, *args);
}

// One line, whatever the message contains.
std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

}  // namespace
}  // namespace dendro::cli

int main(int argc, char** argv) {
  // gRPC core logs (e.g. TLS handshake failures) would add stray stderr lines
  // next to the one error line; the same failure reaches us as a status.
  // Setting GRPC_VERBOSITY brings them back for debugging.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    const absl::Status s = dendro::cli::Main(args);
    std::cout.flush();
    if (s.ok()) return 0;
    std::string message(s.message());
    if (message.empty()) message = absl::StatusCodeToString(s.code());
    if (s.code() == absl::StatusCode::kUnauthenticated) {
      message = absl::StrCat("the server needs a valid API key (set DENDRO_API_KEY or use "
                             "--api-key-file): ", message);
    } else if (s.code() == absl::StatusCode::kPermissionDenied) {
      message = absl::StrCat("permission denied: ", message);
    }
    std::fprintf(stderr, "dendro: %s\n", dendro::cli::OneLine(message).c_str());
    return dendro::cli::IsUsageError(s) ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dendro: internal error: %s\n", dendro::cli::OneLine(e.what()).c_str());
    return 1;
  }
}

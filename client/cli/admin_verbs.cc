// Inspection and housekeeping verbs: jobs, models, datasets.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cli/cli.h"
#include "core/common/status_macros.h"

namespace dendro::cli {
namespace {

struct PageArgs {
  int32_t size = 0;
  std::string token;
  bool all = false;
};

absl::StatusOr<PageArgs> GetPageArgs(const Args& args) {
  PageArgs p;
  DENDRO_ASSIGN_OR_RETURN(int64_t size, args.GetInt("page-size", 0, 1, 1000));
  p.size = static_cast<int32_t>(size);
  p.token = args.Get("page-token").value_or("");
  p.all = args.Has("all");
  return p;
}

// One page, or with --all every page from the token on merged into one
// response (whose next_page_token is then empty).
template <typename Resp, typename FetchFn>
absl::StatusOr<Resp> FetchList(const PageArgs& p, FetchFn fetch) {
  DENDRO_ASSIGN_OR_RETURN(Resp resp, fetch(p.size, p.token));
  while (p.all && !resp.next_page_token().empty()) {
    DENDRO_ASSIGN_OR_RETURN(Resp next, fetch(p.size, resp.next_page_token()));
    const std::string token = next.next_page_token();
    resp.MergeFrom(next);  // appends the repeated items
    resp.set_next_page_token(token);
  }
  return resp;
}

void HintMore(const std::string& next_page_token) {
  if (next_page_token.empty()) return;
  std::fprintf(stderr, "more results: pass --all, or --page-token %s\n", next_page_token.c_str());
}

std::string MethodName(const v1::JobSpec& spec) {
  switch (spec.method_case()) {
    case v1::JobSpec::kL2H:
      return "l2h";
    case v1::JobSpec::kTneb:
      return "tneb";
    case v1::JobSpec::kGhhc:
      return "ghhc";
    case v1::JobSpec::kHppca:
      return "hppca";
    case v1::JobSpec::kHppcaAdd:
      return "hppca_add";
    default:
      return "?";
  }
}

std::string Percent(double fraction) { return absl::StrFormat("%.0f%%", fraction * 100); }

std::string JobModel(const v1::Job& job) {
  if (job.state() == v1::JOB_STATE_SUCCEEDED) {
    return absl::StrCat(job.model_name(), ":", job.model_version());
  }
  return job.spec().model_name();
}

}  // namespace

// --- jobs ---------------------------------------------------------------------

namespace {

// --state queued,running: the states named, in the words the table prints.
absl::StatusOr<std::vector<v1::JobState>> ParseJobStates(const std::string& text) {
  std::vector<v1::JobState> states;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    bool found = false;
    for (int s = v1::JOB_STATE_QUEUED; s <= v1::JobState_MAX; ++s) {
      const auto state = static_cast<v1::JobState>(s);
      if (absl::EqualsIgnoreCase(name, JobStateName(state))) {
        states.push_back(state);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state: '", std::string(name),
          "' is not a job state (queued, running, succeeded, failed or cancelled)"));
    }
  }
  if (states.empty()) return absl::InvalidArgumentError("--state: name at least one state");
  return states;
}

}  // namespace

absl::Status RunJobsList(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(PageArgs page, GetPageArgs(args));
  DENDRO_ASSIGN_OR_RETURN(const int64_t limit, args.GetInt("limit", 0, 1, 1000000));
  if (limit > 0 && (page.all || page.size > 0)) {
    return absl::InvalidArgumentError("--limit does not go with --all or --page-size");
  }
  v1::ListJobsRequest req;
  req.set_newest_first(!args.Has("oldest-first"));
  if (std::optional<std::string> states = args.Get("state")) {
    DENDRO_ASSIGN_OR_RETURN(std::vector<v1::JobState> parsed, ParseJobStates(*states));
    for (v1::JobState s : parsed) req.add_states(s);
  }
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  auto fetch = [&](int32_t n, const std::string& t) {
    req.set_page_size(n);
    req.set_page_token(t);
    return client->ListJobs(req);
  };
  v1::ListJobsResponse resp;
  if (limit > 0) {
    // Pages of exactly what is still wanted, so the last page's token
    // continues right after the last job printed.
    std::string token = page.token;
    do {
      const int64_t want = std::min<int64_t>(limit - resp.jobs_size(), 1000);
      DENDRO_ASSIGN_OR_RETURN(v1::ListJobsResponse next,
                              fetch(static_cast<int32_t>(want), token));
      token = next.next_page_token();
      resp.MergeFrom(next);
      resp.set_next_page_token(token);
    } while (resp.jobs_size() < limit && !token.empty());
  } else {
    DENDRO_ASSIGN_OR_RETURN(resp, FetchList<v1::ListJobsResponse>(page, fetch));
  }
  if (args.Has("json")) return PrintMessageJson(resp);
  std::vector<std::vector<std::string>> rows;
  for (const v1::Job& j : resp.jobs()) {
    rows.push_back({j.id(), JobStateName(j.state()), Percent(j.progress()), j.stage(),
                    MethodName(j.spec()), j.spec().dataset_id(), JobModel(j),
                    FormatTime(j.create_time())});
  }
  PrintTable({"ID", "STATE", "PROGRESS", "STAGE", "METHOD", "DATASET", "MODEL", "CREATED"}, rows);
  HintMore(resp.next_page_token());
  return absl::OkStatus();
}

namespace {

void PrintJob(const v1::Job& j) {
  std::vector<std::pair<std::string, std::string>> f = {
      {"id", j.id()},
      {"state", JobStateName(j.state())},
      {"progress", Percent(j.progress())},
      {"stage", j.stage()},
      {"method", MethodName(j.spec())},
      {"dataset", j.spec().dataset_id()},
      {"model", JobModel(j)},
      {"attempts", absl::StrCat(j.attempts())},
      {"created", FormatTime(j.create_time())},
      {"started", FormatTime(j.start_time())},
      {"ended", FormatTime(j.end_time())},
  };
  if (j.spec().has_l2h() && !j.spec().l2h().aggregation().empty()) {
    f.emplace_back("aggregation", j.spec().l2h().aggregation());
  }
  if (!j.error().message().empty() || j.error().code() != 0) {
    f.emplace_back("error", absl::StrCat(absl::StatusCodeToString(
                                             static_cast<absl::StatusCode>(j.error().code())),
                                         ": ", j.error().message()));
  }
  PrintFields(f);
}

}  // namespace

absl::Status RunJobsGet(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(args.positional()[0]));
  if (args.Has("json")) return PrintMessageJson(job);
  PrintJob(job);
  return absl::OkStatus();
}

absl::Status RunJobsCancel(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(v1::Job job, client->CancelJob(args.positional()[0]));
  if (job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_FAILED) {
    // A cancel is idempotent on the server; a user asking to stop a job that
    // already ended is told so, and a script sees it in the exit code.
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " had already ",
                                                      JobStateName(job.state()),
                                                      "; nothing to cancel"));
  }
  if (args.Has("json")) return PrintMessageJson(job);
  std::cout << DescribeJob(job) << std::endl;
  return absl::OkStatus();
}

absl::Status RunJobsDelete(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_RETURN_IF_ERROR(client->DeleteJob(args.positional()[0]));
  std::cout << "deleted job " << args.positional()[0] << std::endl;
  return absl::OkStatus();
}

absl::Status RunHealth(Context& ctx, const Args&) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_RETURN_IF_ERROR(client->CheckHealth());
  std::cout << "SERVING" << std::endl;
  return absl::OkStatus();
}

absl::Status RunJobsWatch(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  ProgressBar bar;
  // Off a terminal: a line per state or stage change, and per percent of
  // progress (the server may stream far finer steps).
  std::optional<v1::Job> printed;
  DENDRO_ASSIGN_OR_RETURN(
      v1::Job job, client->WatchJob(args.positional()[0], [&](const v1::Job& j) {
        if (bar.active()) {
          bar.Update(j.progress(), absl::StrCat(j.id(), "  ", JobStateName(j.state()),
                                                j.stage().empty() ? "" : "  ", j.stage()));
          return;
        }
        if (printed.has_value() && printed->state() == j.state() &&
            printed->stage() == j.stage() && j.progress() < printed->progress() + 0.01) {
          return;
        }
        std::cout << DescribeJob(j) << std::endl;
        printed = j;
      }));
  if (bar.active()) {
    bar.Done();
    std::cout << DescribeJob(job) << std::endl;
  }
  if (job.state() != v1::JOB_STATE_SUCCEEDED) return JobNotSucceeded(job);
  return absl::OkStatus();
}

// --- models -------------------------------------------------------------------

absl::Status RunModelsList(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(PageArgs page, GetPageArgs(args));
  const std::string name = args.Get("name").value_or("");
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(
      v1::ListModelsResponse resp,
      FetchList<v1::ListModelsResponse>(page, [&](int32_t n, const std::string& t) {
        return client->ListModels(name, n, t);
      }));
  if (args.Has("json")) return PrintMessageJson(resp);
  std::vector<std::vector<std::string>> rows;
  for (const v1::Model& m : resp.models()) {
    rows.push_back({m.name(), absl::StrCat(m.version()), m.method(), absl::StrCat(m.num_leaves()),
                    absl::StrCat(m.input_dim()), m.dataset_id(), m.job_id(),
                    FormatTime(m.create_time()),
                    m.labels().empty() ? "-" : absl::StrJoin(m.labels(), ",")});
  }
  PrintTable({"NAME", "VERSION", "METHOD", "LEAVES", "INPUT_DIM", "DATASET", "JOB", "CREATED",
              "LABELS"},
             rows);
  HintMore(resp.next_page_token());
  return absl::OkStatus();
}

absl::Status RunModelsGet(Context& ctx, const Args& args) {
  absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(args.positional()[0]);
  if (!ref.ok()) return UsageError(std::string(ref.status().message()));
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(v1::Model m, client->GetModel(*ref));
  if (args.Has("json")) return PrintMessageJson(m);
  std::vector<std::pair<std::string, std::string>> f = {
      {"name", m.name()},
      {"version", absl::StrCat(m.version())},
      {"method", m.method()},
      {"leaves", absl::StrCat(m.num_leaves())},
      {"input_dim", absl::StrCat(m.input_dim())},
      {"dataset", m.dataset_id()},
      {"job", m.job_id()},
      {"created", FormatTime(m.create_time())},
      {"labels", m.labels().empty() ? "-" : absl::StrJoin(m.labels(), ", ")},
      {"keep_versions", m.keep_versions() > 0 ? absl::StrCat(m.keep_versions()) : "all"},
  };
  const std::map<std::string, std::string> metadata(m.metadata().begin(), m.metadata().end());
  for (const auto& [key, value] : metadata) f.emplace_back("metadata." + key, value);
  PrintFields(f);
  return absl::OkStatus();
}

absl::Status RunModelsDelete(Context& ctx, const Args& args) {
  absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(args.positional()[0]);
  if (!ref.ok()) return UsageError(std::string(ref.status().message()));
  if (!ref->label().empty()) {
    return UsageError(absl::StrCat("'models delete' takes NAME or NAME:VERSION, not a label ('",
                                   args.positional()[0], "'); 'dendro models unlabel ",
                                   ref->name(), " ", ref->label(), "' removes the label"));
  }
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(int32_t deleted, client->DeleteModel(ref->name(), ref->version()));
  if (ref->version() > 0) {
    std::cout << "deleted model " << ref->name() << " version " << ref->version() << std::endl;
  } else {
    std::cout << "deleted " << deleted << " version" << (deleted == 1 ? "" : "s") << " of model "
              << ref->name() << std::endl;
  }
  return absl::OkStatus();
}

absl::Status RunModelsLabel(Context& ctx, const Args& args) {
  const std::string& name = args.positional()[0];
  const std::string& version_text = args.positional()[1];
  int64_t version = 0;
  if (version_text != "latest" && (!absl::SimpleAtoi(version_text, &version) || version < 1)) {
    return UsageError(absl::StrCat("'models label': VERSION must be a number >= 1 or 'latest', "
                                   "got '", version_text, "'"));
  }
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(v1::Model m,
                          client->SetModelLabel(name, args.positional()[2], version));
  if (args.Has("json")) return PrintMessageJson(m);
  std::cout << "model " << m.name() << "@" << args.positional()[2] << " is version "
            << m.version() << std::endl;
  return absl::OkStatus();
}

absl::Status RunModelsUnlabel(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(int64_t version,
                          client->DeleteModelLabel(args.positional()[0], args.positional()[1]));
  std::cout << "removed label " << args.positional()[1] << " from model " << args.positional()[0]
            << " version " << version << std::endl;
  return absl::OkStatus();
}

absl::Status RunModelsRetain(Context& ctx, const Args& args) {
  int64_t keep = 0;
  if (!absl::SimpleAtoi(args.positional()[1], &keep) || keep < 0 || keep > 1000000) {
    return UsageError(absl::StrCat("'models retain': N must be a number in [0, 1000000], got '",
                                   args.positional()[1], "'"));
  }
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(int32_t deleted, client->SetModelRetention(
                                               args.positional()[0], static_cast<int32_t>(keep)));
  std::cout << "model " << args.positional()[0] << " keeps "
            << (keep == 0 ? std::string("every version")
                          : absl::StrCat("the newest ", keep, " unlabelled version(s)"))
            << "; deleted " << deleted << " now" << std::endl;
  return absl::OkStatus();
}

// --- datasets -----------------------------------------------------------------

namespace {
// "LINEAGE:G" (the reference that names this generation), or "1" for a
// dataset with no appends before it.
std::string GenerationText(const v1::Dataset& d) {
  if (d.generation() <= 1 || d.lineage().empty()) return "1";
  return absl::StrCat(d.lineage(), ":", d.generation());
}
}  // namespace

absl::Status RunDatasetsList(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(PageArgs page, GetPageArgs(args));
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(
      v1::ListDatasetsResponse resp,
      FetchList<v1::ListDatasetsResponse>(page, [&](int32_t n, const std::string& t) {
        return client->ListDatasets(n, t);
      }));
  if (args.Has("json")) return PrintMessageJson(resp);
  std::vector<std::vector<std::string>> rows;
  for (const v1::Dataset& d : resp.datasets()) {
    rows.push_back({d.id(), d.display_name(), GenerationText(d), absl::StrCat(d.rows()),
                    absl::StrCat(d.cols()), d.has_labels() ? "yes" : "no",
                    FormatBytes(d.size_bytes()), FormatTime(d.create_time())});
  }
  PrintTable({"ID", "NAME", "GENERATION", "ROWS", "COLS", "LABELS", "SIZE", "CREATED"}, rows);
  HintMore(resp.next_page_token());
  return absl::OkStatus();
}

absl::Status RunDatasetsGet(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset d, client->GetDataset(args.positional()[0]));
  if (args.Has("json")) return PrintMessageJson(d);
  PrintFields({
      {"id", d.id()},
      {"name", d.display_name()},
      {"generation", GenerationText(d)},
      {"rows", absl::StrCat(d.rows())},
      {"cols", absl::StrCat(d.cols())},
      {"labels", d.has_labels() ? "yes" : "no"},
      {"size", FormatBytes(d.size_bytes())},
      {"created", FormatTime(d.create_time())},
  });
  return absl::OkStatus();
}

absl::Status RunDatasetsDelete(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_RETURN_IF_ERROR(client->DeleteDataset(args.positional()[0]));
  std::cout << "deleted dataset " << args.positional()[0] << std::endl;
  return absl::OkStatus();
}

}  // namespace dendro::cli

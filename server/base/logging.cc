#include "server/base/logging.h"

#include <chrono>
#include <memory>
#include <random>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

// One JSON object per line; see logging.h.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::json line;
    line["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(msg.time),
                                    absl::UTCTimeZone());
    const auto level = spdlog::level::to_string_view(msg.level);
    line["level"] = std::string(level.data(), level.size());
    line["message"] = std::string(msg.payload.data(), msg.payload.size());
    const LogContext& ctx = ThreadLogContext();
    if (!ctx.request_id.empty()) line["request_id"] = ctx.request_id;
    if (!ctx.principal.empty()) line["principal"] = ctx.principal;
    if (!ctx.rpc.empty()) line["rpc"] = ctx.rpc;
    if (!ctx.job_id.empty()) line["job_id"] = ctx.job_id;
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// "%*" in the text pattern: " [request_id rpc principal job]" when known.
class ContextFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const LogContext& ctx = ThreadLogContext();
    std::string text;
    if (!ctx.request_id.empty()) {
      text = absl::StrCat(" [", ctx.request_id, " ", ctx.rpc,
                          ctx.principal.empty() ? "" : " ", ctx.principal, "]");
    }
    if (!ctx.job_id.empty()) absl::StrAppend(&text, " [", ctx.job_id, "]");
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<ContextFlag>();
  }
};

}  // namespace

LogContext& ThreadLogContext() {
  thread_local LogContext context;
  return context;
}

ScopedJobLogContext::ScopedJobLogContext(std::string job_id)
    : previous_(std::move(ThreadLogContext().job_id)) {
  ThreadLogContext().job_id = std::move(job_id);
}

ScopedJobLogContext::~ScopedJobLogContext() { ThreadLogContext().job_id = std::move(previous_); }

absl::Status SetupLogging(const std::string& format, const std::string& level) {
  const spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log_level must be trace, debug, info, warn, error or off, got '", level, "'"));
  }
  spdlog::set_level(lvl);
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else if (format == "text") {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<ContextFlag>('*').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l]%* %v");
    spdlog::set_formatter(std::move(f));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_format must be text or json, got '", format, "'"));
  }
  return absl::OkStatus();
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(absl::GetCurrentTimeNanos()));
  static const char* kHex = "0123456789abcdef";
  std::string id(16, '0');
  uint64_t r = rng();
  for (int i = 0; i < 16; ++i, r >>= 4) id[i] = kHex[r & 15];
  return id;
}

}  // namespace dendro::server

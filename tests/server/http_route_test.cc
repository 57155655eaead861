#include "server/transport/http_route.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace dendro::server {
namespace {

TEST(HttpRouteTest, EveryEndpointIsNamedByItsPattern) {
  const struct {
    const char* path;
    const char* route;
  } cases[] = {
      {"/", "/"},
      {"/console/app.js", "/console/{file}"},
      {"/v2", "/v2"},
      {"/v2/health/live", "/v2/health/live"},
      {"/v2/health/ready", "/v2/health/ready"},
      {"/api/v1/datasets", "/api/v1/datasets"},
      {"/api/v1/datasets/ds-123", "/api/v1/datasets/{id}"},
      {"/api/v1/jobs", "/api/v1/jobs"},
      {"/api/v1/jobs/job-9", "/api/v1/jobs/{id}"},
      {"/api/v1/models", "/api/v1/models"},
      {"/api/v1/models/cifar/versions/3", "/api/v1/models/{name}/versions/{version}"},
      {"/api/v1/models/cifar/versions/latest/tree",
       "/api/v1/models/{name}/versions/{version}/tree"},
      {"/api/v1/models/cifar/versions/2/tree.svg",
       "/api/v1/models/{name}/versions/{version}/tree.svg"},
      {"/api/v1/models/cifar/versions/2/classes",
       "/api/v1/models/{name}/versions/{version}/classes"},
      {"/api/v1/models/cifar/versions/2/diff", "/api/v1/models/{name}/versions/{version}/diff"},
      {"/api/v1/models/cifar/versions/2/diff.svg",
       "/api/v1/models/{name}/versions/{version}/diff.svg"},
      {"/v2/models/cifar", "/v2/models/{name}"},
      {"/v2/models/cifar/ready", "/v2/models/{name}/ready"},
      {"/v2/models/cifar/infer", "/v2/models/{name}/infer"},
      {"/v2/models/cifar/versions/4", "/v2/models/{name}/versions/{version}"},
      {"/v2/models/cifar/versions/4/ready", "/v2/models/{name}/versions/{version}/ready"},
      {"/v2/models/cifar/versions/4/infer", "/v2/models/{name}/versions/{version}/infer"},
  };
  for (const auto& c : cases) EXPECT_EQ(HttpRoute(c.path), c.route) << c.path;
}

TEST(HttpRouteTest, AnythingElseIsOtherSoCallersCannotGrowTheSeries) {
  const char* const unknown[] = {
      "",
      "relative",
      "//",
      "/api",
      "/api/v1",
      "/api/v2/jobs",
      "/api/v1/jobs/a/b",
      "/api/v1/models/cifar",
      "/api/v1/models/cifar/versions/3/leaves",
      "/api/v1/models/cifar/versions/3/tree/extra",
      "/v2/health",
      "/v2/health/dead",
      "/v2/models",
      "/v2/models/cifar/explain",
      "/v2/models/cifar/versions/4/ready/now",
      "/console",
      "/console/a/b",
      "/etc/passwd",
      "/api/v1/jobs/",
      "/metrics",
  };
  std::set<std::string> routes;
  for (const char* path : unknown) {
    EXPECT_EQ(HttpRoute(path), "other") << path;
  }
  // Variable parts never reach the label.
  for (int i = 0; i < 100; ++i) {
    routes.insert(HttpRoute("/api/v1/jobs/job-" + std::to_string(i)));
    routes.insert(HttpRoute("/v2/models/m" + std::to_string(i) + "/infer"));
  }
  EXPECT_EQ(routes.size(), 2u);
}

}  // namespace
}  // namespace dendro::server

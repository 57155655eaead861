// A real PostgreSQL 15 for tests: initdb into a temporary directory and a
// postgres process on a free loopback port, started once per test binary
// and stopped at exit. Each test gets a fresh database from NewDatabase().
//
// As root (CI) the cluster runs as the `postgres` user through runuser,
// since postgres refuses to run as root. When the binaries are missing,
// Available() is false and Why() says so (tests then skip with that
// reason; deploy/packages.txt installs postgresql-15 so CI never does).
#ifndef DENDRO_TESTS_SERVER_POSTGRES_HARNESS_H_
#define DENDRO_TESTS_SERVER_POSTGRES_HARNESS_H_

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>

namespace dendro::testing {

class PostgresHarness {
 public:
  // The process-wide instance, started on first use. Tests run it with
  // fsync off (they never crash the host); `durable` (benchmarks) keeps
  // PostgreSQL's default fsync = on. The first call decides.
  static PostgresHarness& Get(bool durable = false) {
    static PostgresHarness* harness = new PostgresHarness(durable);
    return *harness;
  }

  bool Available() const { return ok_; }
  const std::string& Why() const { return why_; }

  // A new empty database; returns its URI.
  std::string NewDatabase() {
    const std::string name = "t" + std::to_string(::getpid()) + "_" + std::to_string(next_++);
    Run(Bin("psql") + " -q -h 127.0.0.1 -p " + std::to_string(port_) +
        " -U dendro -d postgres -c 'CREATE DATABASE " + name + "'");
    return Uri(name);
  }
  std::string Uri(const std::string& db) const {
    return "postgresql://dendro@127.0.0.1:" + std::to_string(port_) + "/" + db;
  }
  int port() const { return port_; }
  // Runs `sql` (no double quotes or '$' in it) in the database at `uri`,
  // outside Dendro; true on success.
  bool Sql(const std::string& uri, const std::string& sql) const {
    return Run(Bin("psql") + " -q -v ON_ERROR_STOP=1 \"" + uri + "\" -c \"" + sql + "\"");
  }

 private:
  explicit PostgresHarness(bool durable) : durable_(durable) { Start(); }

  static std::string Bin(const std::string& name) { return "/usr/lib/postgresql/15/bin/" + name; }

  // Runs a shell command as the cluster's user; true on exit status 0.
  bool Run(const std::string& cmd) const {
    const std::string full = as_user_.empty() ? cmd : "runuser -u " + as_user_ + " -- " + cmd;
    return std::system((full + " >>" + dir_ + "/harness.log 2>&1").c_str()) == 0;
  }

  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  void Start() {
    for (const char* b : {"initdb", "pg_ctl", "postgres", "psql"}) {
      if (!std::filesystem::exists(Bin(b))) {
        why_ = Bin(b) + " is missing (install postgresql-15; deploy/packages.txt lists it)";
        return;
      }
    }
    char tmpl[] = "/tmp/dendro_pg_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      why_ = "cannot make a temporary directory";
      return;
    }
    dir_ = tmpl;
    if (::geteuid() == 0) {
      const passwd* pw = ::getpwnam("postgres");
      if (pw == nullptr) {
        why_ = "running as root and there is no 'postgres' user to run the server as";
        return;
      }
      as_user_ = "postgres";
      if (::chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
        why_ = "cannot give " + dir_ + " to the postgres user";
        return;
      }
    }
    if (!Run(Bin("initdb") + " -D " + dir_ + "/data -U dendro --auth=trust -E UTF8 --no-sync")) {
      why_ = "initdb failed (see " + dir_ + "/harness.log)";
      return;
    }
    // PostgreSQL cannot bind port 0, so the port is picked before it binds;
    // a test running beside this one may take it in between. Then the
    // postmaster exits saying so, and the start is tried on another port.
    for (int attempt = 0;; ++attempt) {
      port_ = FreePort();
      const std::string opts = "-p " + std::to_string(port_) + " -k " + dir_ +
                               " -c listen_addresses=127.0.0.1 -c max_connections=200" +
                               (durable_ ? "" : " -c fsync=off");
      if (Run(Bin("pg_ctl") + " -D " + dir_ + "/data -l " + dir_ + "/postgres.log -w -t 60 -o '" +
              opts + "' start")) {
        break;
      }
      std::ifstream log(dir_ + "/postgres.log");
      const std::string text((std::istreambuf_iterator<char>(log)),
                             std::istreambuf_iterator<char>());
      if (attempt == 4 || text.find("could not bind") == std::string::npos) {
        why_ = "postgres did not start (see " + dir_ + "/postgres.log)";
        return;
      }
    }
    ok_ = true;
    std::atexit([] { Get().Stop(); });
  }

  void Stop() {
    if (!ok_) return;
    Run(Bin("pg_ctl") + " -D " + dir_ + "/data -m immediate -w stop");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ok_ = false;
  }

  const bool durable_;
  bool ok_ = false;
  std::string why_;
  std::string dir_;
  std::string as_user_;
  int port_ = 0;
  std::atomic<int> next_{0};
};

}  // namespace dendro::testing

#endif  // DENDRO_TESTS_SERVER_POSTGRES_HARNESS_H_

#include "server/models/model_table.h"

#include <algorithm>
#include <map>
#include <utility>

namespace dendro::server {

std::optional<absl::StatusOr<ModelTable::Entry>> ModelTable::Find(
    const std::string& name, int64_t version, const std::string& label) const {
  ReaderMutexLock lock(&mu_);
  const auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  const Name& n = it->second;
  if (!label.empty()) {
    const auto l = n.labels.find(label);
    if (l == n.labels.end()) return LabelNotFound(name, label);
    version = l->second;
  }
  if (version == 0) return n.versions.rbegin()->second;  // a held name has a version
  const auto v = n.versions.find(version);
  if (v == n.versions.end()) return ModelNotFound(name, version);
  return v->second;
}

uint64_t ModelTable::NextTicket() {
  MutexLock lock(&mu_);
  return next_ticket_++;
}

bool ModelTable::NewerLocked(const std::string& name, uint64_t ticket) const {
  const auto it = names_.find(name);
  if (it != names_.end()) return ticket > it->second.ticket;
  return ticket > removed_floor_;
}

void ModelTable::InstallLocked(const std::string& name, std::vector<StoredModel> versions,
                               uint64_t ticket, Dropped* dropped) {
  Name n;
  n.ticket = ticket;
  for (StoredModel& s : versions) {
    const int64_t v = s.model.version();
    for (const std::string& label : s.model.labels()) n.labels[label] = v;
    n.versions[v] = std::make_shared<const StoredModel>(std::move(s));
  }
  const auto old = names_.find(name);
  if (old != names_.end() && dropped != nullptr) {
    for (const auto& [v, entry] : old->second.versions) {
      if (n.versions.count(v) == 0) dropped->emplace_back(name, v);
    }
  }
  if (n.versions.empty()) {
    if (old != names_.end()) names_.erase(old);
    removed_floor_ = std::max(removed_floor_, ticket);
    return;
  }
  names_[name] = std::move(n);
}

bool ModelTable::Install(const std::string& name, std::vector<StoredModel> versions,
                         uint64_t ticket, bool held_only, Dropped* dropped) {
  MutexLock lock(&mu_);
  if (held_only && names_.find(name) == names_.end()) return false;
  if (!NewerLocked(name, ticket)) return false;
  InstallLocked(name, std::move(versions), ticket, dropped);
  return true;
}

void ModelTable::InstallAll(std::vector<StoredModel> all, uint64_t ticket, Dropped* dropped) {
  absl::flat_hash_map<std::string, std::vector<StoredModel>> by_name;
  for (StoredModel& s : all) {
    std::string name = s.model.name();
    by_name[name].push_back(std::move(s));
  }
  MutexLock lock(&mu_);
  std::vector<std::string> held;
  held.reserve(names_.size());
  for (const auto& [name, n] : names_) held.push_back(name);
  for (const std::string& name : held) {
    if (!NewerLocked(name, ticket)) continue;
    auto it = by_name.find(name);
    std::vector<StoredModel> versions;
    if (it != by_name.end()) versions = std::move(it->second);
    InstallLocked(name, std::move(versions), ticket, dropped);
  }
}

void ModelTable::Forget(const std::string& name, uint64_t ticket) {
  MutexLock lock(&mu_);
  names_.erase(name);
  removed_floor_ = std::max(removed_floor_, ticket);
}

bool ModelTable::Holds(const std::string& name) const {
  ReaderMutexLock lock(&mu_);
  return names_.find(name) != names_.end();
}

}  // namespace dendro::server

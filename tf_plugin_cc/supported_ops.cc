#include "supported_ops.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/json/json.h"
#include "google/protobuf/struct.pb.h"

namespace npu_tf {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;
using Combo = std::map<std::string, tensorflow::DataType>;

std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("NPU_SUPPORTED_OPS")) paths.push_back(env);
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&LoadKernelSpecs), &info) && info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.rfind('/') + 1);
    paths.push_back(dir + "../../graph_engine/ops/supported_ops.json");  // npu_device/_lib/
    paths.push_back(dir + "../graph_engine/ops/supported_ops.json");     // tensorflow-plugins/
  }
  return paths;
}

absl::Status ParseType(const Value& v, const std::string& where, tensorflow::DataType* out) {
  if (!tensorflow::DataType_Parse(v.string_value(), out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", v.string_value(), "' is not a DataType name like DT_FLOAT"));
  }
  return absl::OkStatus();
}

std::vector<std::string> Strings(const Struct& s, const std::string& field) {
  std::vector<std::string> out;
  auto it = s.fields().find(field);
  if (it == s.fields().end()) return out;
  for (const Value& v : it->second.list_value().values()) out.push_back(v.string_value());
  return out;
}

// True when `combo` is one TF serves itself: every attr the DEVICE_DEFAULT kernel pins matches.
bool TakenByTf(const Combo& combo, const std::vector<Combo>& tf_default) {
  for (const Combo& taken : tf_default) {
    bool match = true;
    for (const auto& [attr, type] : taken) {
      auto it = combo.find(attr);
      if (it == combo.end() || it->second != type) match = false;
    }
    if (match) return true;
  }
  return false;
}

absl::Status Expand(const std::string& op, const Struct& entry, std::vector<KernelSpec>* specs) {
  std::map<std::string, std::vector<tensorflow::DataType>> allowed;
  auto types = entry.fields().find("type_attrs");
  if (types != entry.fields().end()) {
    for (const auto& [attr, list] : types->second.struct_value().fields()) {
      for (const Value& v : list.list_value().values()) {
        tensorflow::DataType t;
        absl::Status s = ParseType(v, absl::StrCat(op, ".", attr), &t);
        if (!s.ok()) return s;
        allowed[attr].push_back(t);
      }
    }
  }
  std::vector<Combo> tf_default;
  auto taken = entry.fields().find("tf_default_kernels");
  if (taken != entry.fields().end()) {
    for (const Value& v : taken->second.list_value().values()) {
      Combo combo;
      for (const auto& [attr, name] : v.struct_value().fields()) {
        absl::Status s = ParseType(name, absl::StrCat(op, ".tf_default_kernels"), &combo[attr]);
        if (!s.ok()) return s;
      }
      tf_default.push_back(combo);
    }
  }
  std::vector<std::string> host_memory = Strings(entry, "host_memory_inputs");
  for (const std::string& out : Strings(entry, "host_memory_outputs")) host_memory.push_back(out);

  // Every combination of the type attrs that is ours, grouped by all attrs but the first so
  // each group is one kernel with a list constraint on the first attr.
  std::vector<Combo> combos = {Combo()};
  for (const auto& [attr, list] : allowed) {
    std::vector<Combo> next;
    for (const Combo& c : combos) {
      for (tensorflow::DataType t : list) {
        next.push_back(c);
        next.back()[attr] = t;
      }
    }
    combos = std::move(next);
  }
  std::map<Combo, KernelSpec> groups;
  for (Combo c : combos) {
    if (TakenByTf(c, tf_default)) continue;
    auto first = c.begin();
    std::pair<std::string, tensorflow::DataType> head;
    if (first != c.end()) {
      head = *first;
      c.erase(first);
    }
    KernelSpec& spec = groups[c];
    if (spec.op.empty()) {
      spec.op = op;
      spec.host_memory = host_memory;
      for (const auto& [attr, t] : c) spec.type_constraints[attr] = {t};
    }
    if (!head.first.empty()) spec.type_constraints[head.first].push_back(head.second);
  }
  for (auto& [rest, spec] : groups) specs->push_back(std::move(spec));
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadKernelSpecs(std::vector<KernelSpec>* specs, std::string* source) {
  std::vector<std::string> tried = Candidates();
  std::string text;
  for (const std::string& path : tried) {
    std::ifstream file(path);
    if (!file) continue;
    std::stringstream buffer;
    buffer << file.rdbuf();
    text = buffer.str();
    *source = path;
    break;
  }
  if (source->empty()) {
    return absl::NotFoundError(absl::StrCat(
        "the graph engine's op table supported_ops.json was not found (looked at: ",
        absl::StrJoin(tried, ", "), "); set NPU_SUPPORTED_OPS to its path"));
  }
  Struct table;
  auto parsed = google::protobuf::json::JsonStringToMessage(text, &table);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(*source, " is not valid JSON: ",
                                                   parsed.message()));
  }
  auto ops = table.fields().find("ops");
  if (ops == table.fields().end()) {
    return absl::InvalidArgumentError(absl::StrCat(*source, " has no \"ops\" object"));
  }
  // Sorted, so registration (and its log) does not depend on the hash map's order.
  std::map<std::string, const Struct*> sorted;
  for (const auto& [op, entry] : ops->second.struct_value().fields()) {
    sorted[op] = &entry.struct_value();
  }
  for (const auto& [op, entry] : sorted) {
    absl::Status s = Expand(op, *entry, specs);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(*source, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace npu_tf

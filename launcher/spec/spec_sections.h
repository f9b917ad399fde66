#pragma once
// Reading each section of a version-1 spec into JobSpec, and the checks that span keys.
// Internal to launcher/spec.

#include <string>

#include "launcher/spec/job_spec.h"
#include "launcher/spec/spec_reader.h"

namespace dtrain::spec {

/// Every key of a version-1 spec below the top level (version itself is checked by the caller).
/// Unset keys keep JobSpec's defaults; problems go to `sink`.
void read_spec_body(DiagnosticSink& sink, const YAML::Node& root, const std::string& base_dir, JobSpec& spec,
                    EnvValues env_values);

/// worker.env, worker.pass_env and worker.env_file (with env_file_names) of the worker section,
/// into settings.env, env_file, env_file_names, env_from_file and pass_env (spec_worker_env.cpp).
void read_worker_env(DiagnosticSink& sink, const Section& worker, const std::string& base_dir, EnvValues env_values,
                     WorkerSettings& settings);

/// intent: (spec_intent.cpp). A recovery mode of in-place needs elastic.in_place.
void read_health(DiagnosticSink& sink, const Section& root, HealthSettings& health);
void read_intent(DiagnosticSink& sink, const Section& root, const ElasticSettings& elastic, IntentSettings& intent);

}  // namespace dtrain::spec

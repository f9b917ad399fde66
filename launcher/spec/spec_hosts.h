#pragma once
// The host part of a spec: hosts / hostfile / the embedded default, include / exclude, spares.
// Internal to launcher/spec.

#include <string>

#include "launcher/spec/job_spec.h"
#include "launcher/spec/spec_reader.h"

namespace dtrain::spec {

/// Fills spec.hosts and spec.spares from the top-level section. spec.slots_per_host must be read
/// already: hosts without their own slot count get it. With neither `hosts` nor `hostfile`, the
/// job runs on the embedded default: one host "localhost".
void read_hosts(DiagnosticSink& sink, const Section& root, const std::string& base_dir, JobSpec& spec);

/// The kubernetes: block (spec_kubernetes.cpp), after the transport is read: required with
/// `hosts: kubernetes` (from_kubernetes), allowed with transport: kubectl, refused otherwise.
void read_kubernetes(DiagnosticSink& sink, const Section& root, const std::string& base_dir, bool from_kubernetes,
                     JobSpec& spec);

}  // namespace dtrain::spec

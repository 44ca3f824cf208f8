// actors/roles/role_entry.hpp — how every role's behavior starts. A role is spawned with the
// configuration its node built (a value: *_config) and the node's services handed to it
// (*_services: event sink, fault hooks, gate, link); its handlers share one read-only
// environment joining the two (role_env), made by enter_role, which also installs the handlers
// every role needs (drop_unexpected; name_crashes for a supervised child).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <caf/scheduled_actor.hpp>

#include "actors/roles/supervisor.hpp"

namespace dd::actors {

/// A role's environment: its configuration (`Config`, the node's value) and, as `svc`, the
/// services its node handed it at spawn.
template <class Config, class Services>
struct role_env : Config {
  Services svc;
};

/// What a thrown exception does to a role: `named` (a supervised child: learner, fragment owner,
/// evaluator) ends it with the exception's text (name_crashes), so its supervisor's events and a
/// failed run name the cause; `caf_default` leaves CAF's handling.
enum class role_crashes { named, caf_default };

/// The first thing a role's behavior does: joins `config` and `services` into its environment
/// (`Env`, a role_env), names its crashes (`crashes`) and makes it survive messages it cannot use,
/// logged through `svc.log` naming it `who` (drop_unexpected).
template <class Env, class Config, class Services>
std::shared_ptr<const Env> enter_role(caf::scheduled_actor* self, const Config& config,
                                      Services services, const std::string& who,
                                      role_crashes crashes = role_crashes::named) {
  auto env = std::make_shared<const Env>(Env{config, std::move(services)});
  if (crashes == role_crashes::named) name_crashes(self);
  drop_unexpected(self, env->svc.log, who);
  return env;
}

}  // namespace dd::actors

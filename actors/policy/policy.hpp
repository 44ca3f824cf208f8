// actors/policy/policy.hpp — umbrella header for the pure decision code shared by the runtime's
// actors (fragment owner, learner, supervisor) and the goodput simulator. See docs/policy.md.
#pragma once

#include "actors/policy/admission.hpp"
#include "actors/policy/credit_window.hpp"
#include "actors/policy/grace.hpp"
#include "actors/policy/push_schedule.hpp"
#include "actors/policy/quorum.hpp"
#include "actors/policy/restart_budget.hpp"
#include "actors/policy/uptime.hpp"

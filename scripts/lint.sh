#!/usr/bin/env bash
# scripts/lint.sh — code-health checks with clang-format / clang-tidy 14 (Debian; setup.sh
# installs them). Configuration: .clang-format and .clang-tidy at the repository root.
#
# Usage:
#   scripts/lint.sh format-check [file...]   clang-format --dry-run -Werror over the tracked C++
#                                            files (or the files given); exit 1 when any file
#                                            would change. Fix with: scripts/lint.sh format
#   scripts/lint.sh format [file...]         rewrite the files in place (clang-format -i)
#   scripts/lint.sh role-faults              no role file (actors/roles/) holds fault code:
#                                            fates of pushes and broadcasts, held-back copies,
#                                            damaged copies belong to the link (chunk_flow.hpp's
#                                            fault filter); what a step, owner or respawn fault
#                                            does to the node's hooks (actors/services/
#                                            step_faults, owner_faults, fault_hooks). Exit 1
#                                            naming each line found.
#   scripts/lint.sh role-services           no role header (actors/roles/*.hpp) names a node
#                                            service (run_log, fault_hooks): roles get them
#                                            from their node at spawn, through the services
#                                            of actors/services/node_services.hpp (the run log
#                                            as a write-only event_sink); and no `mutable
#                                            std::atomic` in actors/ (shared state hidden in a
#                                            const value); no role applies or asks the
#                                            write-failure policy (write_trouble, write_policy::):
#                                            the node tells it by message. Exit 1 naming each
#                                            line found.
#   scripts/lint.sh tidy [file...]           clang-tidy over a fast subset of sources (the list
#                                            below; or the .cpp files given), with the compile
#                                            commands of the clang tree (build-clang, or
#                                            $DD_CLANG_BUILD; scripts/sanitize.sh configures
#                                            it). Every finding is an error (exit 1).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
mode="${1:-}"
shift || true

# The tidy subset: the code that parses untrusted bytes and the shared file helpers (about a
# minute on 2 cores).
tidy_default=(
  util/files.cpp util/crc32c.cpp
  messages/codec.cpp messages/control_codec.cpp messages/error.cpp actors/link/tensor_channel.cpp
  actors/link/frame_guard.cpp
  runtime/checkpoint.cpp runtime/config/loader.cpp runtime/config/detail/sandbox.cpp
)

cxx_files() {
  if (($#)); then printf '%s\n' "$@"; else git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh'; fi
}

# Words of fault code; none may appear in a role file. Message faults: the link's filters hold
# them (actors/link/push_faults.*, chunk_flow.hpp flow_publish). The fault_hooks schedule and
# what its faults do (a kill, a damaged checkpoint, a respawn's downtime, a live fault): the
# node's hooks (actors/services/step_faults.*, owner_faults.*, fault_hooks.hpp; a kill's downtime
# reaches the supervisor in the exit reason they hand the role); a role only calls the hook it
# was handed and does what it answers.
role_fault_words='\bfate\b|held_push|held_broadcast|damaged_copy|broadcast_fault|push_fault|faults->on_broadcast\(|faults->on_push\(|push_filter|edited_push'
role_fault_words+='|\bfault_hooks\b|\bon_owner\(|\bon_learner_step\(|owner_kill_delays|take_damage|take_downtime|damage_checkpoint|checkpoint_damaged|die_by_fault|\b(add|arm|clear)_live\('

case "$mode" in
  role-faults)
    rc=0
    for f in actors/roles/*; do
      if grep -nE "$role_fault_words" "$f"; then
        echo "lint.sh: role-faults: $f holds fault code (lines above); it belongs to the link (actors/link/chunk_flow.hpp) or to a node's fault hook (actors/services/)" >&2
        rc=1
      fi
    done
    ((rc)) || echo "lint.sh: role-faults clean"
    exit "$rc"
    ;;
  role-services)
    rc=0
    for f in actors/roles/*.hpp; do
      if grep -nE '\b(run_log|fault_hooks)\b' "$f"; then
        echo "lint.sh: role-services: $f names a node service (lines above); a role gets it from its node through its services (actors/services/node_services.hpp)" >&2
        rc=1
      fi
    done
    if grep -nE 'write_trouble[[:space:]]*\(|write_policy::|on_failed_write|on_failing' actors/roles/*.hpp actors/roles/*.cpp; then
      echo "lint.sh: role-services: a role applies or asks the write-failure policy (lines above); it reports a failed write to its node (write_trouble_atom) and does what the node's write_verdict_atom says" >&2
      rc=1
    fi
    if grep -rnE 'mutable[[:space:]]+std::atomic' actors; then
      echo "lint.sh: role-services: a mutable std::atomic (lines above) is shared state in a const value; make it a service the node owns and hands over" >&2
      rc=1
    fi
    ((rc)) || echo "lint.sh: role-services clean"
    exit "$rc"
    ;;
  format-check)
    command -v clang-format >/dev/null || { echo "lint.sh: clang-format not found (scripts/setup.sh)" >&2; exit 2; }
    mapfile -t files < <(cxx_files "$@")
    if clang-format --style=file --dry-run -Werror "${files[@]}"; then
      echo "lint.sh: format-check clean (${#files[@]} files)"
    else
      echo "lint.sh: format-check: files above differ from .clang-format (scripts/lint.sh format)" >&2
      exit 1
    fi
    ;;
  format)
    mapfile -t files < <(cxx_files "$@")
    clang-format --style=file -i "${files[@]}"
    echo "lint.sh: formatted ${#files[@]} files"
    ;;
  tidy)
    command -v clang-tidy >/dev/null || { echo "lint.sh: clang-tidy not found (scripts/setup.sh)" >&2; exit 2; }
    build="${DD_CLANG_BUILD:-$here/build-clang}"
    [[ -f "$build/compile_commands.json" ]] || { echo "lint.sh: $build/compile_commands.json missing: run scripts/sanitize.sh (or configure build-clang) first" >&2; exit 2; }
    files=("$@")
    ((${#files[@]})) || files=("${tidy_default[@]}")
    # The generated Cap'n Proto headers must exist for messages/*.cpp.
    cmake --build "$build" --target dd_messages_capnp >/dev/null
    rc=0
    clang-tidy -p "$build" --quiet --warnings-as-errors='*' "${files[@]}" || rc=$?
    if ((rc)); then
      echo "lint.sh: tidy found problems (exit $rc)" >&2
      exit 1
    fi
    echo "lint.sh: tidy clean (${#files[@]} files)"
    ;;
  *)
    sed -n '2,15p' "${BASH_SOURCE[0]}" >&2
    exit 2
    ;;
esac

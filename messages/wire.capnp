# messages/wire.capnp — the wire and on-disk contract of the Decoupled DiLoCo runtime.
#
# SCHEMAS ONLY GROW. Never renumber, retype, reuse or remove an ordinal (@N), an enumerant or a
# union member. A new field gets the next free ordinal at the end of its struct; a new enumerant
# goes at the end of its enum; a field that is no longer used is kept (rename it to obsoleteXxx).
# Readers must tolerate fields they do not know (Cap'n Proto does) and zero defaults for fields an
# older writer did not set. Bump Envelope.schemaVersion when a change needs a reader to notice.
#
# The C++ values and the codec are in messages/codec.hpp; docs/wire.md describes the protocol.
@0xfbe891f7d976cf75;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dd::capnp_wire");

# How a fragment payload's float32 elements are stored (messages/encoding.hpp).
enum PayloadEncoding {
  fp32 @0;   # raw little-endian float32
  bf16 @1;   # bfloat16, round-to-nearest-even
  int8 @2;   # blockwise absmax, block 64: float32 scale + 64 int8 codes per block
  int4 @3;   # blockwise absmax, block 64: float32 scale + 32 bytes (two 4-bit codes per byte)
}

# Learner -> health monitor.
struct JoinRequest {
  requestedLearnerId @0 :Int32 = -1;   # -1: any id
  host @1 :Text;
  devices @2 :List(Int32);
  live @3 :Bool;                       # a running learner rejoining (its syncer came back): it
                                       # keeps its own step and data cursor
  step @4 :UInt64;                     # live: its inner steps completed
  tokens @5 :UInt64;                   # live: tokens of its current incarnation
  incarnation @6 :UInt64;              # live: its current incarnation
  computeSeconds @7 :Float64;          # live: seconds its current incarnation spent in inner
                                       # steps (as Heartbeat.computeSeconds)
  tokensTotal @8 :UInt64;              # live: its tokens over every incarnation (the joins'
                                       # tokensBefore + tokens of its current incarnation)
  computeTotalSeconds @9 :Float64;     # live: the same for its compute seconds
}

# Health monitor -> learner.
struct JoinReply {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  experimentConfigJson @2 :Text;
  shardIndex @3 :UInt32;
  shardCount @4 :UInt32;
  resumeStep @5 :UInt64;
  dataCursor @6 :Data;                 # opaque data-loader cursor
  tokensBefore @7 :UInt64;             # the monitor's count of this learner's tokens before
                                       # this incarnation (its earlier incarnations)
  computeBeforeSeconds @8 :Float64;    # the same for its compute seconds
}

# Learner -> health monitor.
struct Heartbeat {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  step @2 :UInt64;
  tokens @3 :UInt64;
  stepTimeEmaSeconds @4 :Float64;
  dataCursor @5 :Data;
  loss @6 :Float64;                    # training loss of the last step, nats/token
  computeSeconds @7 :Float64;          # seconds this incarnation spent in inner steps
  lr @8 :Float64;                      # learning rate the last step applied
  # Divergence check (one fragment per heartbeat, in turn): the global value the learner holds
  # for heldFragment (its stored copy, not its parameters), heldVersion, the digest the owner
  # sent with that value (FragmentBroadcast.valueDigest) and the digest of the bytes it holds
  # now. heldDigest 0 = nothing reported.
  heldFragment @9 :Int32;
  heldVersion @10 :UInt64;
  heldOwnerDigest @11 :UInt64;
  heldDigest @12 :UInt64;
  # The learner's wall clock (Unix seconds) when this step ended; 0 = not sent (the syncer then
  # stamps learner_loss.csv's row with its own clock on arrival).
  stepEndUnixSeconds @13 :Float64;
}

# Learner -> fragment owner: one chunk of a pseudo-gradient push.
struct FragmentPush {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  fragmentId @2 :Int32;
  baseVersion @3 :UInt64;
  steps @4 :UInt64;                    # inner steps since the fragment was last received
  tokens @5 :UInt64;                   # tokens since the fragment was last received
  encoding @6 :PayloadEncoding;
  totalElements @7 :UInt64;            # fragment vector length before encoding
  chunkIndex @8 :UInt32;
  chunkCount @9 :UInt32;
  payload @10 :Data;                   # this chunk's encoded bytes
  transferId @11 :UInt64;              # increasing per (learner, incarnation, fragment)
  payloadBytes @12 :UInt64;            # encoded bytes of the whole payload
  chunkOffset @13 :UInt64;             # byte offset of this chunk in the whole payload
  containsFrom @14 :UInt64;            # oldest earlier transfer (same learner, incarnation and
                                       # fragment) whose progress this delta also holds; 0 = none
  payloadCrc32c @15 :UInt32;           # CRC-32C (Castagnoli) of this chunk's payload, set on
                                       # encode; 0 = not set (an older writer): not checked
}

# Fragment owner -> learners: one chunk of a fragment's new global value.
struct FragmentBroadcast {
  fragmentId @0 :Int32;
  version @1 :UInt64;
  totalElements @2 :UInt64;
  encoding @3 :PayloadEncoding;
  chunkIndex @4 :UInt32;
  chunkCount @5 :UInt32;
  payload @6 :Data;
  payloadBytes @7 :UInt64;
  chunkOffset @8 :UInt64;
  merged @9 :List(MergedPush);         # per learner, its newest push merged into the value so far
  payloadCrc32c @10 :UInt32;           # CRC-32C (Castagnoli) of this chunk's payload, set on
                                       # encode; 0 = not set (an older writer): not checked
  valueDigest @11 :UInt64;             # digest (runtime/value_digest.hpp) of the whole value as a
                                       # learner decodes it; the same on every chunk; 0 = none
}

# The newest push of one learner that a fragment's value contains (the learner rebases on it).
struct MergedPush {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  transferId @2 :UInt64;
  version @3 :UInt64;                  # the version whose outer step merged it
}

enum RejectReason {
  stale @0;
  duplicate @1;
  malformed @2;
  shapeMismatch @3;
  nonFinite @4;
  unknownLearner @5;
  staleIncarnation @6;
  superseded @7;                       # base predates a merged push of the same learner
  implausible @8;                      # norm far above the accepted median, or tokens > steps × B·T
}

# Fragment owner -> learner: a push was refused.
struct Rejection {
  learnerId @0 :Int32;
  fragmentId @1 :Int32;
  reason @2 :RejectReason;
  detail @3 :Text;
  currentVersion @4 :UInt64;
  transferId @5 :UInt64;               # the refused push's transfer id (0 when undecodable)
}

# Every message on the wire is one Envelope. Besides the body it names the run and the sender's
# incarnation; a receiver refuses an envelope of another schema version, another run, or an
# incarnation older than the one it knows for that sender (docs/wire.md "Envelope").
struct Envelope {
  schemaVersion @0 :UInt16 = 1;        # 2 since the envelope carries runId and senderIncarnation
  runId @15 :Text;                     # the sender's run (hex, <run_dir>/run_id)
  senderIncarnation @16 :UInt64;       # a learner: its incarnation (0 before its first join);
                                       # a syncer role: the syncer's incarnation (starts of the run)
  body :union {
    joinRequest @1 :JoinRequest;
    joinReply @2 :JoinReply;
    heartbeat @3 :Heartbeat;
    push @4 :FragmentPush;
    broadcast @5 :FragmentBroadcast;
    reject @6 :Rejection;
    ack @7 :PushAck;
    pull @8 :PullRequest;
    progress @9 :Progress;
    nodeJoin @10 :NodeJoin;
    nodeJoinReply @11 :NodeJoinReply;
    leave @12 :Leave;
    fragmentQuery @13 :FragmentQuery;
    fragmentHeld @14 :FragmentHeld;
    liveView @17 :LiveView;
    ownerDirectory @18 :OwnerDirectory;
    subscribe @19 :Subscribe;
    stop @20 :Stop;
    statusRequest @21 :StatusRequest;
    statusReply @22 :StatusReply;
    drain @23 :Drain;
    drainReply @24 :DrainReply;
    nodeEvents @25 :NodeEvents;
  }
}

# One retained (version, value) pair of an owner's anchor ring.
struct AnchorEntry {
  version @0 :UInt64;
  value @1 :Data;                      # little-endian float32
}

# A fragment owner's checkpoint (body of the checkpoint file; header in messages/codec.hpp).
struct OwnerCheckpoint {
  fragmentId @0 :Int32;
  version @1 :UInt64;
  value @2 :Data;                      # theta_p, little-endian float32
  momentum @3 :Data;                   # b_p, little-endian float32
  xiStepSeconds @4 :Float64;
  xiQuorumSeconds @5 :Float64;
  xiSyncSeconds @6 :Float64;
  anchors @7 :List(AnchorEntry);       # oldest first; may be empty
  merged @8 :List(MergedPush);         # per learner, newest merged push (rebase bookkeeping)
  runId @9 :Text;                      # the run that wrote it (<run_dir>/run_id); empty: older
  experimentDigest @10 :Text;          # digest of what the state depends on (run_dir.hpp
                                       # state_digest); empty: older writer
  mergeRecord @11 :Text;               # the `merge` event of `version` as JSON (fields without
                                       # event/t/time); empty when the version is no merge
}

# Fragment owner -> learner: a whole push was accepted (it is pending for, or already in, the next
# outer step); the learner may send its next push of this fragment.
struct PushAck {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  fragmentId @2 :Int32;
  transferId @3 :UInt64;               # the accepted push's transfer id
  version @4 :UInt64;                  # the owner's version of the fragment when it accepted
}

# Learner (or evaluator) -> fragment owner: send me the fragment's current value (as broadcast
# chunks, to the sender only).
struct PullRequest {
  learnerId @0 :Int32 = -1;            # -1: not a learner (the evaluator)
  incarnation @1 :UInt64;
  fragmentId @2 :Int32;                # the fragment the receiving owner holds
}

# Health monitor -> learner: global training progress (reply to each heartbeat).
struct Progress {
  totalTokens @0 :UInt64;              # tokens all learners have trained on, all incarnations
  liveLearners @1 :UInt32;             # learners alive when it was sent
  step @2 :UInt64;                     # the answered heartbeat's step (0: not an answer)
  meanStep @3 :Float64;                # the push clock: sum over steps of 1 / live learners
}

# ---- cluster control (docs/nodes.md "The node handshake") -------------------------------------

# Learner node -> health monitor: the handshake of a learner process, before its learners join.
struct NodeJoin {
  runId @0 :Text;                      # the run the node belongs to; empty: any (a first start)
  protocolVersion @1 :UInt32;          # dd::protocol_version of the node's binary
  nodeName @2 :Text;                   # the node's name (nodes file, logs)
  host @3 :Text;                       # host name of the node
  learnerIds @4 :List(Int32);          # the ids the node asks for; empty: any free ids
  learnerCount @5 :UInt32;             # how many free ids when learnerIds is empty
  dataBytes @6 :UInt64;                # size of the node's data file, bytes
  dataHash @7 :Text;                   # hash of its training split (hex)
  challenge @8 :Data;                  # the nonce of the syncer's authChallenge it answers
  proof @9 :Data;                      # HMAC-SHA256 of the join token over the request and
                                       # challenge (actors/link/join_auth.hpp); empty: none
}

# Why the monitor refused a node.
enum NodeRefusal {
  none @0;
  otherRun @1;                         # runId names another run
  protocolVersion @2;                  # protocolVersion differs from the syncer's
  dataMismatch @3;                     # dataBytes / dataHash differ from the syncer's
  noFreeLearner @4;                    # every learner id asked for is live (or out of range)
  runFinished @5;                      # the run is stopping or over
  badRequest @6;                       # the request did not decode or made no sense
  authChallenge @7;                    # not a refusal: answer the reply's challenge with a proof
  unauthorized @8;                     # the join token proof was missing, wrong or replayed
}

# Health monitor -> learner node.
struct NodeJoinReply {
  accepted @0 :Bool;
  refusal @1 :NodeRefusal;
  reason @2 :Text;                     # human-readable; both sides log it
  runId @3 :Text;
  experimentJson @4 :Text;             # the resolved experiment (config::load_json reads it)
  experimentHash @5 :Text;             # hash of the experiment JSON (hex)
  learnerIds @6 :List(Int32);          # the ids the node now holds
  dataBytes @7 :UInt64;                # the syncer's data file size and training-split hash
  dataHash @8 :Text;
  stepsPerLearner @9 :UInt64;          # schedule horizon / steps budget per learner
  challenge @10 :Data;                 # with authChallenge: the nonce to prove the token over
}

# Learner -> health monitor: leaving for good (budget spent, drained, stopped).
struct Leave {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  interrupted @2 :Bool;                # its own node was stopped (a signal): its budget is not
                                       # done, so the monitor keeps its id unfinished
}

# ---- rebuilding a fragment from the learners (docs/wire.md "Rebuild") ---------------------------

# Fragment owner -> learner: which version of this fragment's global value do you hold (the last
# broadcast you applied)? With sendValue the learner also sends that value to the owner, as
# FragmentBroadcast chunks (atom dd_copy) carrying its version and merged list.
struct FragmentQuery {
  fragmentId @0 :Int32;
  queryId @1 :UInt64;                  # echoed in the answer; increasing per owner incarnation
  sendValue @2 :Bool;
}

# Learner -> fragment owner: the answer to a FragmentQuery.
struct FragmentHeld {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  fragmentId @2 :Int32;
  queryId @3 :UInt64;
  have @4 :Bool;                       # false: no copy (a learner still loading its fragments)
  version @5 :UInt64;                  # the held value's version (valid when have)
}

# ---- membership and control (docs/wire.md "Control") ---------------------------------------------
# Actor handles never travel inside these bodies: a message that names actors travels with a list
# of handles next to its bytes (the same order as the list it describes), or the sender is the
# handle.

# One live learner as the health monitor sees it.
struct LiveLearner {
  learnerId @0 :Int32;
  incarnation @1 :UInt64;
  stepTimeEmaSeconds @2 :Float64;      # EMA of its inner-step wall time (xi_step input)
}

# Health monitor -> fragment owners: the live learners (the quorum input). Travels with one
# handle per learner, in list order (where broadcasts go).
struct LiveView {
  epoch @0 :UInt64;                    # increases with every change
  learners @1 :List(LiveLearner);
}

# Health monitor -> learners (and the evaluator): the current owner of each fragment. Travels with
# one handle per entry, in list order.
struct OwnerDirectory {
  fragmentIds @0 :List(Int32);         # entry i: the fragment whose owner is handle i
}

# Fragment owner -> health monitor: I own this fragment (send me the live view). The sender is
# the owner.
struct Subscribe {
  fragmentId @0 :Int32;
}

# Health monitor or a learner's supervisor -> learner, job -> health monitor: finish
# after the current step (a learner drains its pushes, then leaves).
struct Stop {
  reason @0 :Text;                     # why (logs); may be empty
}

# Operator (dd-node status) -> health monitor.
struct StatusRequest {
  unused @0 :Bool;                     # no fields yet
}

# Health monitor -> operator: the live view as JSON text (learners, incarnations, leases,
# fragment versions; docs/monitoring.md "dd-node status and dd-node drain").
struct StatusReply {
  json @0 :Text;
  challenge @1 :Data;                  # a nonce a drain may prove the join token over
}

# Operator (dd-node drain) -> health monitor: stop this learner gracefully.
struct Drain {
  learnerId @0 :Int32;
  challenge @1 :Data;                  # the status reply's nonce
  proof @2 :Data;                      # HMAC-SHA256 of the join token (join_auth.hpp)
}

# Health monitor -> operator.
struct DrainReply {
  accepted @0 :Bool;                   # false: no live learner of that id
  detail @1 :Text;                     # human-readable; printed by dd-node drain
}

# Learner node -> health monitor: a batch of the node's event lines (JSONL), written to
# <run_dir>/nodes/<node>.events.jsonl.
struct NodeEvents {
  node @0 :Text;
  lines @1 :Text;                      # at most 1 MiB
  stream @2 :Text;                     # the sending process's stream ("" = none); at most 64 bytes
  offset @3 :UInt64;                   # bytes of that stream before `lines` (a resent batch
                                       # repeats its offset; the receiver drops the overlap)
}

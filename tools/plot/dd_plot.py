#!/usr/bin/python3
"""dd_plot.py -- the figures of `dd-node plot` (docs/plots.md), drawn with matplotlib.

Run by `dd-node plot INPUT [--out DIR]`, which names the interpreter (Debian's /usr/bin/python3,
where the python3-matplotlib package installs). INPUT is one of
  * a run directory (events.jsonl, learner_loss.csv; chaos.jsonl and nodes/*.events.jsonl when
    present): loss_tokens.png, loss_time.png, merges.png, timeline.png, bytes.png;
  * the comparison table of several experiments (`dd-node run --table FILE`, a JSON list):
    comparison.png;
  * a dd-goodput output directory or its goodput.json: goodput.png.
Every figure has a title, axes labelled with units and a legend. One line per figure on stdout
names the file and what went into it.

Exit status: 0 ok; 1 an input is missing, unreadable or corrupt, or matplotlib is not installed
for this interpreter (the message names the file and line, or the package); 2 bad arguments.
A JSON or CSV line that does not parse is an error naming the file and line, except the file's
last line when it lacks its newline: a line a kill cut short, skipped with a warning on stderr.
"""

import argparse
import csv
import json
import math
import os
import sys

PROG = "dd-node plot"


class InputError(Exception):
    """An input that is missing, unreadable or corrupt; the message names it."""


def fail(msg, code=1):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(code)


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def load_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError as e:
        fail(
            f"matplotlib is not installed for {sys.executable} ({e}); on Debian: "
            "apt-get install python3-matplotlib (it installs for /usr/bin/python3)"
        )


# --------------------------------------------------------------------------------------------
# Reading the run directory


def read_lines(path):
    """The file's lines; the last one flagged when it has no newline (a torn tail)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})")
    lines = text.split("\n")
    torn = not text.endswith("\n") and text != ""
    if not torn:
        lines = lines[:-1]  # the empty string after the final newline
    return lines, torn


def read_jsonl(path, required=True):
    """The JSON objects of a .jsonl file, in order; [] when absent and not required."""
    if not os.path.exists(path):
        if required:
            raise InputError(f"{path} does not exist")
        return []
    lines, torn = read_lines(path)
    return parse_rows(path, lines, torn, 1, json_object, "not a JSON object")


def json_object(line):
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def parse_rows(path, lines, torn, first, parse, what):
    """parse(line) of each non-blank line, numbered from first. A ValueError stops with an
    InputError naming path:line and `what`, except on the last line of a torn file (cut short
    without a newline): that line is skipped with a warning."""
    last = first + len(lines) - 1
    out = []
    for i, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            out.append(parse(line))
        except ValueError as e:
            if torn and i == last:
                warn(f"{path}:{i}: skipped the last line, cut short without a newline")
                continue
            raise InputError(f"{path}:{i}: {what} ({e}): {line[:80]!r}")
    return out


LOSS_COLUMNS = ["wall_time", "learner", "incarnation", "step", "tokens", "loss", "lr"]


def loss_row(line):
    fields = next(csv.reader([line]))
    if len(fields) != len(LOSS_COLUMNS):
        raise ValueError(f"{len(fields)} fields, expected {len(LOSS_COLUMNS)}")
    return {
        "time": float(fields[0]),
        "learner": int(fields[1]),
        "incarnation": int(fields[2]),
        "step": int(fields[3]),
        "tokens": int(fields[4]),
        "loss": float(fields[5]),
        "lr": float(fields[6]),
    }


def read_loss_csv(path):
    """learner_loss.csv rows as dicts of numbers."""
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist")
    lines, torn = read_lines(path)
    if not lines:
        raise InputError(f"{path} is empty (no header)")
    header = next(csv.reader([lines[0]]))
    if header != LOSS_COLUMNS:
        raise InputError(f"{path}:1: header {','.join(header)!r}, expected {','.join(LOSS_COLUMNS)!r}")
    rows = parse_rows(path, lines[1:], torn, 2, loss_row, "bad row")
    rows.sort(key=lambda r: r["time"])
    return rows


def num(e, key, path):
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{path}: a {e.get('event', '?')!r} event without a number {key!r}: {e}")
    return float(v)


class Run:
    """What the figures need from one run directory."""

    def __init__(self, run_dir):
        if not os.path.isdir(run_dir):
            raise InputError(f"run directory {run_dir} does not exist")
        self.dir = run_dir
        self.events_path = os.path.join(run_dir, "events.jsonl")
        self.events = read_jsonl(self.events_path)
        if not self.events:
            raise InputError(f"{self.events_path} holds no event")
        # Forwarded learner-node events (dd-node launch / learner nodes): crashes, starts, done.
        self.node_events = []
        nodes = os.path.join(run_dir, "nodes")
        if os.path.isdir(nodes):
            for name in sorted(os.listdir(nodes)):
                if name.endswith(".events.jsonl"):
                    self.node_events += read_jsonl(os.path.join(nodes, name))
        self.loss = read_loss_csv(os.path.join(run_dir, "learner_loss.csv"))
        self.chaos_path = os.path.join(run_dir, "chaos.jsonl")
        self.has_chaos = os.path.exists(self.chaos_path)
        self.chaos = read_jsonl(self.chaos_path, required=False)
        self.summary = None
        sp = os.path.join(run_dir, "summary.json")
        if os.path.exists(sp):
            try:
                with open(sp) as f:
                    self.summary = json.load(f)
            except (OSError, ValueError) as e:
                raise InputError(f"{sp}: not readable JSON ({e})")
        for e in self.events + self.node_events:
            num(e, "time", self.events_path)
        starts = [e["time"] for e in self.events if e.get("event") in ("start", "resume")]
        times = [e["time"] for e in self.events]
        self.t0 = min(starts) if starts else min(times)
        self.t_end = max(times + [r["time"] for r in self.loss])
        self.name = next((e.get("experiment") for e in self.events if e.get("event") == "start"),
                         os.path.basename(os.path.normpath(run_dir)))

    def of(self, kind):
        return [e for e in self.events if e.get("event") == kind]

    def evals(self):
        """(seconds, tokens, val_loss) of every evaluation, the final one once."""
        out = []
        for e in self.of("eval"):
            p = (num(e, "time", self.events_path) - self.t0, num(e, "tokens", self.events_path),
                 num(e, "val_loss", self.events_path))
            if out and out[-1][1:] == p[1:]:
                continue  # the final evaluation repeats the last periodic one's numbers
            out.append(p)
        return out

    def eval_series(self):
        """The periodic evaluations [(seconds, tokens, val_loss)], the final one (seconds, tokens,
        val_loss) or None, and the windows each scored (None when the events do not say): the
        periodic ones score eval.periodic_windows windows, the final one eval.windows (the whole
        validation split by default), so the two are different measurements."""
        periodic, final, pw, fw = [], None, None, None
        for e in self.of("eval"):
            p = (num(e, "time", self.events_path) - self.t0, num(e, "tokens", self.events_path),
                 num(e, "val_loss", self.events_path))
            w = e.get("windows") if isinstance(e.get("windows"), int) else None
            if e.get("final") is True:
                final, fw = p, w
            else:
                periodic.append(p)
                pw = w if pw is None else pw
        return periodic, final, pw, fw

    def learner_curves(self):
        """Per learner: (seconds, run tokens, loss) of each step; run tokens = the sum over
        learners of each one's latest token count at that moment (the x of the val-loss curve)."""
        latest, total, out = {}, 0, {}
        for r in self.loss:
            total += r["tokens"] - latest.get(r["learner"], 0)
            latest[r["learner"]] = r["tokens"]
            out.setdefault(r["learner"], []).append((r["time"] - self.t0, total, r["loss"]))
        return out


def moving_mean(ys, w):
    if w <= 1:
        return list(ys)
    out, s = [], 0.0
    for i, y in enumerate(ys):
        s += y
        if i >= w:
            s -= ys[i - w]
        out.append(s / min(i + 1, w))
    return out


def log_scale_if_wide(ax, ys):
    pos = [y for y in ys if y > 0 and math.isfinite(y)]
    if pos and max(pos) / min(pos) > 4:
        ax.set_yscale("log")


# --------------------------------------------------------------------------------------------
# The run's figures


TIME_AXIS = "time since the run started (s)"
TOKENS_AXIS = "tokens trained, all learners (tokens)"


def grid_and_legend(axes, fontsize=8):
    for a in axes:
        a.grid(alpha=0.3)
        a.legend(fontsize=fontsize)


def label_time_panels(a1, a2, title, top_ylabel, bottom_ylabel):
    """Titles and labels a figure of two panels over the run's time (merges, bytes)."""
    a1.set_title(title)
    a1.set_ylabel(top_ylabel)
    a2.set_ylabel(bottom_ylabel)
    a2.set_xlabel(TIME_AXIS)
    grid_and_legend((a1, a2))


def fig_loss(plt, run, out_dir, by):
    """Validation loss and each learner's training loss against tokens (by=1) or time (by=0)."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    curves = run.learner_curves()
    cmap = plt.get_cmap("tab10")
    ys = []
    for k, (lid, pts) in enumerate(sorted(curves.items())):
        xs = [p[by] for p in pts]
        loss = [p[2] for p in pts]
        w = max(1, len(loss) // 60)
        ax.plot(xs, loss, color=cmap(k % 10), alpha=0.2, linewidth=0.6)
        smooth = moving_mean(loss, w)
        ax.plot(xs, smooth, color=cmap(k % 10), linewidth=1.2,
                label=f"learner {lid} training loss" + (f" (mean of {w} steps)" if w > 1 else ""))
        ys += smooth
    # The periodic evaluations and the final one score different windows (eval.periodic_windows
    # against eval.windows, the whole split by default): one curve and one marked point, each
    # naming its windows, not one line across the two.
    periodic, final, pw, fw = run.eval_series()
    if periodic:
        ax.plot([p[by] for p in periodic], [p[2] for p in periodic], "o-", color="black",
                linewidth=2, markersize=4,
                label=f"validation loss, periodic ({len(periodic)} evaluations"
                + (f", {pw} windows each)" if pw else ")"))
        ys += [p[2] for p in periodic]
    if final:
        ax.plot([final[by]], [final[2]], "*", color="red", markersize=14, markeredgecolor="black",
                label=f"final validation loss {final[2]:.4f}" + (f" ({fw} windows)" if fw else ""))
        ys.append(final[2])
    ev = periodic + ([final] if final else [])
    log_scale_if_wide(ax, ys)
    what = "tokens" if by else "time"
    ax.set_title(f"{run.name}: validation and training loss against {what}")
    ax.set_xlabel(TOKENS_AXIS if by else TIME_AXIS)
    ax.set_ylabel("loss (nats/token)")
    grid_and_legend((ax,))
    path = os.path.join(out_dir, f"loss_{what}.png")
    save(fig, path, plt)
    evals = f"{len(periodic)} periodic" + (f" of {pw} windows" if pw else "")
    evals += (", the final one" + (f" of {fw} windows" if fw else "") + " marked apart") if final \
        else ", no final one"
    return path, (f"{len(curves)} learners, {sum(len(v) for v in curves.values())} steps, "
                  f"{len(ev)} evaluations ({evals})")


def fig_merges(plt, run, out_dir):
    merges = run.of("merge")
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    cmap = plt.get_cmap("tab10")
    frags = sorted({int(num(m, "fragment", run.events_path)) for m in merges})
    for k, fr in enumerate(frags):
        ms = [m for m in merges if int(m["fragment"]) == fr]
        xs = [num(m, "time", run.events_path) - run.t0 for m in ms]
        cs = []
        for m in ms:
            c = m.get("contributors")
            if not isinstance(c, list):
                raise InputError(f"{run.events_path}: a merge event without a 'contributors' list: {m}")
            cs.append(len(c))
        a1.plot(xs, cs, ".", color=cmap(k % 10), markersize=3, alpha=0.5)
        a1.plot(xs, moving_mean(cs, max(1, len(cs) // 30)), color=cmap(k % 10), linewidth=1.2,
                label=f"fragment {fr} contributors (moving mean)")
        a2.plot(xs, [m.get("grace_s", 0.0) for m in ms], ".-", color=cmap(k % 10), markersize=3,
                linewidth=0.8, label=f"fragment {fr} grace window")
    live = [(num(m, "time", run.events_path) - run.t0, m["live"]) for m in merges if "live" in m]
    if live:
        a1.step([p[0] for p in live], [p[1] for p in live], where="post", color="grey",
                linestyle="--", linewidth=1, label="live learners")
    label_time_panels(a1, a2, f"{run.name}: contributors per merge and grace window ({len(merges)} merges)",
                      "contributors per merge (learners)", "grace window (s)")
    if not merges:
        a1.text(0.5, 0.5, "no merge in events.jsonl", transform=a1.transAxes, ha="center")
    path = os.path.join(out_dir, "merges.png")
    save(fig, path, plt)
    return path, f"{len(merges)} merges over {len(frags)} fragments"


def learner_spans(run):
    """Per learner: stepping spans, away spans, restarts and rejoins (seconds since the start).

    A restart is what summary.json's `learner_restarts` counts: a new learner process after a
    failure — in a part with learner nodes (`node_join` events: a syncer), a `rejoin` with
    `live: false`; in an in-process part (`dd-node run`), a learner `respawn` event (its new
    incarnation from the learner's next `rejoin`/`learner_start`). A rejoin is any other new
    incarnation: the same process back after an outage (`live: true`), or the learners of a
    resumed `dd-node run` (`--resume`; a resumed syncer's learner processes are new: restarts, as
    summary.json counts them). Each is (seconds, incarnation); incarnations come from
    events.jsonl (a learner node's own copies say nothing more)."""
    by = {}
    for r in run.loss:
        by.setdefault(r["learner"], []).append(r["time"] - run.t0)
    ids = set(by)
    joins, downs, done = {}, {}, {}
    incarnation = {}
    restarts, rejoins = {}, {}
    # Which parts of events.jsonl (each from its start or resume event) had learner nodes.
    remote_parts, part = set(), 0
    for e in run.events:
        if e.get("event") in ("start", "resume"):
            part += 1
        elif e.get("event") == "node_join":
            remote_parts.add(part)
    part = 0
    respawned = {}  # learner -> time of a respawn whose new incarnation is not seen yet
    own = [(e, True) for e in run.events] + [(e, False) for e in run.node_events]
    for e, syncer in sorted(own, key=lambda x: x[0]["time"]):
        kind = e.get("event")
        if syncer and kind in ("start", "resume"):
            part += 1
        if syncer and kind == "respawn" and e.get("kind") == "learner" and \
                part not in remote_parts and isinstance(e.get("id"), int):
            respawned[e["id"]] = e["time"] - run.t0
            continue
        if "learner" not in e or not isinstance(e.get("learner"), int):
            continue
        lid = e["learner"]
        t = e["time"] - run.t0
        if kind in ("join", "rejoin", "learner_start"):
            ids.add(lid)
            inc = e.get("incarnation", 0)
            if not syncer:  # a node's own learner_start: the syncer's rejoin says what it was
                pass
            elif lid in respawned and inc > incarnation.get(lid, -1):
                restarts.setdefault(lid, []).append((respawned.pop(lid), inc))
            elif syncer and kind == "rejoin" and e.get("live") is False and part in remote_parts:
                restarts.setdefault(lid, []).append((t, inc))
            elif lid in incarnation and inc > incarnation[lid]:
                rejoins.setdefault(lid, []).append((t, inc))
            if syncer:
                incarnation[lid] = max(inc, incarnation.get(lid, 0))
            if kind != "learner_start" and lid in downs:
                joins.setdefault(lid, []).append((downs.pop(lid), t))
        elif kind in ("failure", "crash") or (kind == "leave" and lid not in done):
            ids.add(lid)
            if kind == "leave" and run.t_end - run.t0 - t < 0.5:
                continue  # the leave at the run's end
            downs.setdefault(lid, t)
        elif kind == "learner_done":
            done[lid] = t
    for lid, t in respawned.items():  # respawned, no new incarnation seen (the run ended)
        restarts.setdefault(lid, []).append((t, incarnation.get(lid, 0) + 1))
    for lid, t in downs.items():  # never came back
        joins.setdefault(lid, []).append((t, run.t_end - run.t0))
    spans = {}
    for lid in sorted(ids):
        ts = by.get(lid, [])
        stepping = []
        if ts:
            gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
            typical = gaps[len(gaps) // 2] if gaps else 0.0
            limit = max(1.0, 5 * typical)
            start = prev = ts[0]
            for t in ts[1:]:
                if t - prev > limit:
                    stepping.append((start, prev - start))
                    start = t
                prev = t
            stepping.append((start, prev - start))
        spans[lid] = (stepping, joins.get(lid, []), restarts.get(lid, []), rejoins.get(lid, []))
    return spans


def stacked_offsets(xs, close):
    """Vertical offsets (points) for labels at `xs` on one row: a label closer than `close` to
    the one before it goes one level up (three levels), so close markers' labels do not overlap."""
    out, level, prev = [], 0, None
    for x in xs:
        level = (level + 1) % 3 if prev is not None and x - prev < close else 0
        out.append(2 + 8 * level)
        prev = x
    return out


def faults(run):
    """(start, duration or None, label, source) of every fault: chaos.jsonl's records and the
    runtime's own `fault` events (in-process faults)."""
    out = []
    for c in run.chaos:
        if c.get("kind") in ("session", "heal", "revert") or "t" not in c:
            continue
        d = c.get("duration")
        out.append((num(c, "t", run.chaos_path) - run.t0, d if isinstance(d, (int, float)) else None,
                    f"{c.get('kind')} {c.get('target', '')}".strip(), "chaos.jsonl"))
    for e in run.of("fault"):
        who = f"learner {e['learner']}" if e.get("learner", -1) >= 0 else \
              f"fragment {e.get('fragment')}" if e.get("fragment", -1) >= 0 else ""
        out.append((e["time"] - run.t0, None, f"{e.get('fault', 'fault')} {who}".strip(), "events.jsonl"))
    return out


def fig_timeline(plt, run, out_dir):
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D

    spans = learner_spans(run)
    fl = faults(run)
    ids = sorted(spans)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * max(1, len(ids))))
    end = run.t_end - run.t0
    n_restarts = n_rejoins = 0
    for row, lid in enumerate(ids):
        stepping, away, restarts, rejoins = spans[lid]
        ax.broken_barh(stepping, (row - 0.3, 0.6), facecolors="tab:green")
        ax.broken_barh([(a, b - a) for a, b in away], (row - 0.3, 0.6), facecolors="tab:red",
                       hatch="//", alpha=0.7)
        for t, inc in rejoins:  # no label: a resume gives every learner one at the same time
            n_rejoins += 1
            ax.plot([t], [row + 0.42], marker="v", markerfacecolor="white", color="tab:gray",
                    markersize=7)
        restarts = sorted(restarts)
        for (t, inc), dy in zip(restarts, stacked_offsets([t for t, _ in restarts], 0.08 * end)):
            n_restarts += 1
            ax.plot([t], [row + 0.42], marker="v", color="black", markersize=8)
            right = t > 0.8 * end  # keep the label inside the axes
            ax.annotate(f"restart: incarnation {inc}", (t, row + 0.42), textcoords="offset points",
                        xytext=(-6 if right else 4, dy), ha="right" if right else "left",
                        fontsize=7)
    width = max(end * 0.004, 1e-3)
    xmax = end * 1.01 if end > 0 else 1
    # Each fault is a number above the axes (close ones stacked in up to 3 rows) and a line of
    # the key beside the legend (vertical labels of close faults would cover each other and the
    # restart labels).
    axes_pt = ax.get_position().width * fig.get_figwidth() * 72
    last_at = [-1e9] * 3  # per row, the x (points) of its last number
    key = []
    for i, (t, d, label, src) in enumerate(sorted(fl, key=lambda f: f[0]), start=1):
        ax.axvspan(t, t + (d if d else width), color="tab:purple" if src == "chaos.jsonl" else "tab:orange",
                   alpha=0.25)
        x_pt = t / xmax * axes_pt
        gap = 6 + 4 * len(str(i))
        level = next((k for k, at in enumerate(last_at) if x_pt - at >= gap),
                     min(range(len(last_at)), key=lambda k: last_at[k]))
        last_at[level] = x_pt
        ax.annotate(str(i), (t, 1.0), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(0, 2 + 8 * level), fontsize=6, ha="center", va="bottom",
                    color="indigo" if src == "chaos.jsonl" else "darkorange", annotation_clip=False)
        key.append(f"{i}: {label} at {t:.1f} s" + (f" for {d:g} s" if d else ""))
    
    ax.set_yticks(range(len(ids)))
    ax.set_yticklabels([f"learner {i}" for i in ids])
    ax.set_ylim(-0.6, max(1, len(ids)) - 0.4 + 0.3)
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.set_xlabel(TIME_AXIS)
    ax.set_ylabel("learner")
    n_chaos = sum(1 for f in fl if f[3] == "chaos.jsonl")
    chaos_note = f"{n_chaos} from chaos.jsonl" if run.has_chaos else "no chaos.jsonl"
    ax.set_title(f"{run.name}: learners stepping, away and restarted; faults shaded ({chaos_note})",
                 pad=8 + 8 * min(3, len(fl)))
    shown = 12  # the key's lines at most; the rest are counted
    key_lines = [Line2D([], [], linestyle="", label=k) for k in key[:shown]]
    if len(key) > shown:
        key_lines.append(Line2D([], [], linestyle="", label=f"... {len(key) - shown} more faults"))
    ax.legend(handles=[
        Patch(facecolor="tab:green", label="stepping (a row in learner_loss.csv)"),
        Patch(facecolor="tab:red", hatch="//", alpha=0.7, label="away (failure or leave until it rejoins)"),
        Line2D([], [], marker="v", color="black", linestyle="",
               label="restart: a new learner process (summary.json's learner restarts)"),
        Line2D([], [], marker="v", markerfacecolor="white", color="tab:gray", linestyle="",
               label="rejoin or resume: a new incarnation, not a restart"),
        Patch(facecolor="tab:purple", alpha=0.25, label="fault from chaos.jsonl"),
        Patch(facecolor="tab:orange", alpha=0.25, label="in-process fault (events.jsonl)"),
    ] + key_lines, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    path = os.path.join(out_dir, "timeline.png")
    save(fig, path, plt)
    return path, (f"{len(ids)} learners, {n_restarts} restarts, {len(fl)} faults "
                  f"({n_chaos} from chaos.jsonl), {n_rejoins} rejoins or resumes")


def fig_bytes(plt, run, out_dir):
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    totals = {}
    for kind, label, color in (("push", "pushes (learners to owners)", "tab:blue"),
                               ("broadcast", "broadcasts (owners to learners)", "tab:orange")):
        es = [e for e in run.of(kind) if "bytes" in e]
        xs = [num(e, "time", run.events_path) - run.t0 for e in es]
        bs = [num(e, "bytes", run.events_path) for e in es]
        cum, s = [], 0.0
        for b in bs:
            s += b
            cum.append(s / 2**20)
        totals[kind] = s
        a1.step(xs, cum, where="post", color=color, label=f"{label}: {s / 2**20:.1f} MiB")
        # The rate in one-second bins.
        bins = {}
        for x, b in zip(xs, bs):
            bins[int(x)] = bins.get(int(x), 0.0) + b
        ks = sorted(bins)
        a2.plot([k + 0.5 for k in ks], [bins[k] / 2**20 for k in ks], ".-", color=color,
                markersize=3, linewidth=0.8, label=label)
    label_time_panels(a1, a2, f"{run.name}: bytes on the wire (payload of each push and broadcast)",
                      "cumulative (MiB)", "rate, 1 s bins (MiB/s)")
    path = os.path.join(out_dir, "bytes.png")
    save(fig, path, plt)
    return path, f"{totals['push']:.0f} bytes pushed, {totals['broadcast']:.0f} bytes broadcast"


def plot_run(plt, run_dir, out_dir):
    run = Run(run_dir)
    return [fig_loss(plt, run, out_dir, 1), fig_loss(plt, run, out_dir, 0),
            fig_merges(plt, run, out_dir), fig_timeline(plt, run, out_dir),
            fig_bytes(plt, run, out_dir)]


# --------------------------------------------------------------------------------------------
# Several experiments: the comparison table


def table_run_dir(table_path, row, i):
    """The run directory of the table's row i: its `run_dir` (as written, from the current
    directory, else beside the table), else runs/<experiment>."""
    given = row.get("run_dir")
    name = row.get("experiment")
    tried = []
    for cand in ([given] if given else []) + ([os.path.join("runs", name)] if name else []):
        for c in (cand, os.path.join(os.path.dirname(os.path.abspath(table_path)), os.path.basename(cand))):
            if c in tried:
                continue
            tried.append(c)
            if os.path.isdir(c):
                return c
    raise InputError(f"{table_path}: row {i} ({name!r}): no run directory found (tried {', '.join(tried) or 'none: no run_dir or experiment'})")


def plot_table(plt, table_path, rows, out_dir):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5.2))
    cmap = plt.get_cmap("tab10")
    ys, names = [], []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "experiment" not in row:
            raise InputError(f"{table_path}: row {i} is not an object with an 'experiment'")
        run = Run(table_run_dir(table_path, row, i))
        ev = run.evals()
        summ = row.get("summary", {})
        if not ev and isinstance(summ.get("final_val_loss"), (int, float)):
            ev = [(summ.get("wall_seconds", 0.0), summ.get("tokens", 0), summ["final_val_loss"])]
        label = f"{row['experiment']} (final {ev[-1][2]:.3f})" if ev else f"{row['experiment']} (no evaluation)"
        for a, by in ((a1, 1), (a2, 0)):
            a.plot([p[by] for p in ev], [p[2] for p in ev], "o-", color=cmap(i % 10), markersize=3,
                   label=label)
        ys += [p[2] for p in ev]
        names.append(row["experiment"])
    for a in (a1, a2):
        log_scale_if_wide(a, ys)
        a.set_ylabel("validation loss (nats/token)")
    grid_and_legend((a1, a2))
    a1.set_xlabel(TOKENS_AXIS)
    a2.set_xlabel(TIME_AXIS)
    a1.set_title("validation loss against tokens")
    a2.set_title("validation loss against time")
    fig.suptitle(f"{len(rows)} experiments of {os.path.basename(table_path)}")
    path = os.path.join(out_dir, "comparison.png")
    save(fig, path, plt)
    return [(path, f"{len(rows)} experiments: {', '.join(names)}")]


# --------------------------------------------------------------------------------------------
# The goodput simulator (dd-goodput's goodput.json)


def chips_label(n):
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def plot_goodput(plt, path, j, out_dir):
    cells = j.get("cells")
    if not isinstance(cells, list) or not cells:
        raise InputError(f"{path}: no 'cells' list")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    cmap = plt.get_cmap("tab10")
    series = {}
    for c in cells:
        try:
            m = c["strategy"] in ("diloco", "decoupled_diloco")
            label = c["strategy"] + (f" M={c['learners']}" if m else "")
            series.setdefault(label, []).append(
                (float(c["chips"]), c["goodput_mean"], c["goodput_sd"], c["uptime_mean"], c["uptime_sd"]))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}: a cell without {e}: {c}")
    chips = sorted({p[0] for s in series.values() for p in s})
    color = {}
    for k, (label, pts) in enumerate(sorted(series.items())):
        pts.sort()
        color[label] = cmap(k % 10)
        for ax, (mi, si) in zip(axes, ((1, 2), (3, 4))):
            ax.errorbar([p[0] for p in pts], [p[mi] for p in pts], yerr=[p[si] for p in pts],
                        color=color[label], marker="o", markersize=4, capsize=3,
                        linestyle="--" if label.startswith("diloco ") else "-", label=label)
    # The paper's numbers as crosses in the colour of the strategy's line.
    marked = set()
    for p in j.get("paper", {}).get("points", []):
        label = p["strategy"] + (f" M={p['learners']}" if "learners" in p else "")
        axes[0].plot(p["chips"], p["goodput"], "x", color=color.get(label, "black"), markersize=10,
                     mew=2, label=None if label in marked else f"paper: {label}")
        marked.add(label)
    cfg = j.get("config", {})
    for ax, what in zip(axes, ("goodput (fraction of chip-time training)",
                               "uptime (fraction of wall time global training advances)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(chips)
        ax.set_xticklabels([chips_label(n) for n in chips])
        ax.minorticks_off()
        ax.set_xlabel("allocated chips (log scale)")
        ax.set_ylabel(what)
    grid_and_legend(axes, fontsize=7)
    axes[0].set_title("goodput against cluster size")
    axes[1].set_title("uptime against cluster size")
    fig.suptitle(f"dd-goodput: MTBI {cfg.get('mtbi_days', '?')} days/chip, {cfg.get('slice_chips', '?')} "
                 f"chips/slice, {cfg.get('days', '?')} days simulated, seeds {j.get('seed', '?')}.."
                 f"{j.get('seed', 0) + j.get('seeds', 1) - 1}; bars = 1 std-dev")
    out = os.path.join(out_dir, "goodput.png")
    save(fig, out, plt)
    return [(out, f"{len(cells)} cells, {len(series)} strategies, {len(chips)} cluster sizes")]


# --------------------------------------------------------------------------------------------


def save(fig, path, plt):
    fig.tight_layout()
    tmp = path + ".tmp"
    try:
        fig.savefig(tmp, format="png", dpi=110)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"cannot write {path}: {e.strerror}")
    finally:
        plt.close(fig)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON ({e})")


def main():
    ap = argparse.ArgumentParser(prog=PROG, description="Figures of a run, a comparison table or dd-goodput.")
    ap.add_argument("input", help="RUN_DIR, a comparison table (JSON), or dd-goodput's goodput.json or --out DIR")
    ap.add_argument("--out", help="folder for the figures (default: RUN_DIR/figures, or beside the file)")
    a = ap.parse_args()
    src = a.input
    try:
        if not os.path.exists(src):
            raise InputError(f"{src} does not exist")
        if os.path.isdir(src) and os.path.exists(os.path.join(src, "goodput.json")) and \
                not os.path.exists(os.path.join(src, "events.jsonl")):
            src = os.path.join(src, "goodput.json")
        plt = load_matplotlib()
        if os.path.isdir(src):
            out = a.out or os.path.join(src, "figures")
            os.makedirs(out, exist_ok=True)
            written = plot_run(plt, src, out)
        else:
            j = load_json(src)
            out = a.out or os.path.join(os.path.dirname(src) or ".", "figures")
            os.makedirs(out, exist_ok=True)
            if isinstance(j, dict) and j.get("tool") == "dd-goodput":
                written = plot_goodput(plt, src, j, out)
            elif isinstance(j, list):
                written = plot_table(plt, src, j, out)
            else:
                raise InputError(f"{src}: neither a comparison table (a JSON list) nor dd-goodput's "
                                 "goodput.json (\"tool\": \"dd-goodput\")")
    except InputError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename or src}: {e.strerror}")
    for path, what in written:
        print(f"wrote {path}: {what}")


if __name__ == "__main__":
    main()

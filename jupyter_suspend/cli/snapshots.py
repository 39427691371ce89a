"""``jupyter suspend snapshots list|delete|prune``: GKE pod snapshots of one environment or a namespace.

With the caller's own Kubernetes credentials (:mod:`.kube`), not the sidecar's.
The order of a cleanup matters (platform-facts.md section 1): deleting a
PodSnapshot frees its stored image through a finalizer that needs the
snapshot's PodSnapshotPolicy, so a snapshot is deleted before its policy, a
policy only once a fresh list shows no snapshot referring to it, and a snapshot
whose policy is already gone is left alone and reported (deleting it would
orphan its storage for good; recreate the policy first).

An *environment* is a StatefulSet's pods (``NAME-0``...): a StatefulSet, a
Kubeflow Notebook (its StatefulSet) or a Kubeflow Workspace (the StatefulSets
it owns). Snapshots are matched by their origin-pod annotation, so those of a
stopped environment (no pod now) are found too. ``--all`` takes the namespace,
one environment per origin pod's StatefulSet.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import urllib3
from traitlets import Bool, Float, Int, Unicode, default

from ..common.times import rfc3339_epoch
from ..common.workloads import (
    NOTEBOOK_NAME_LABEL,
    ORIGIN_POD_ANNOTATION,
    PIN_SNAPSHOT_ANNOTATION,
    PODSNAPSHOT_GROUP,
    PODSNAPSHOT_VERSION,
    TRIGGERED_BY_LABEL,
    WORKLOAD_KINDS,
)
from ..server.snapshots import is_object_name
from .base import BASE_FLAGS, EXIT_FAILED, EXIT_OK, GroupApp, UsageError
from .kube import KUBE_ALIASES, KubeCommandApp
from .server_only import snapshots_via_server

if TYPE_CHECKING:
    from kubernetes import client

JSON = dict[str, Any]
SNAPSHOTS, TRIGGERS, POLICIES = "podsnapshots", "podsnapshotmanualtriggers", "podsnapshotpolicies"
WORKSPACE_NAME_LABEL = "notebooks.kubeflow.org/workspace-name"
OWNER_KIND = {"notebook": "Notebook", "workspace": "Workspace"}
OWNER_LABEL = {"notebook": NOTEBOOK_NAME_LABEL, "workspace": WORKSPACE_NAME_LABEL}
#: GKE's Ready reason while a snapshot is still being uploaded.
UPLOADING = "AwaitingCheckpoint"
DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
ORDINAL = re.compile(r"^(.+)-(\d+)$")


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` -> seconds; a :class:`UsageError` otherwise."""
    match = DURATION.fullmatch(text.strip())
    if not match:
        raise UsageError(f"--older-than {text!r} is not a duration (a number and one of s, m, h, d, w: 7d)")
    return float(match.group(1)) * UNIT_SECONDS[match.group(2)]


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def human_size(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _condition(obj: JSON, kind: str) -> JSON | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def snapshot_size(snapshot: JSON) -> int | None:
    """The stored size if the platform reports one (GKE documents no field: the spellings the sidecar tries)."""
    status = snapshot.get("status") or {}
    storage = status.get("storageStatus") or {}
    for holder in (storage.get("gcs") or {}, storage, status):
        for key in ("sizeBytes", "totalSizeBytes", "size"):
            value = holder.get(key)
            if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
                return int(value)
    return None


def matches_selector(selector: JSON | None, labels: dict[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels and matchExpressions) against a pod's labels."""
    if not selector:
        return True  # an empty selector selects everything
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


class SnapshotKube:
    """The API calls of these commands, in one namespace, each bounded by ``timeout`` seconds."""

    def __init__(self, api: client.ApiClient, namespace: str, timeout: float = 15.0) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.timeout = timeout

    def _opts(self) -> JSON:
        return {"_preload_content": False, "_request_timeout": self.timeout}

    @staticmethod
    def _items(response: Any) -> list[JSON]:
        data = json.loads(response.data or b"{}")
        return list(data.get("items") or [])

    def objects(self, plural: str) -> list[JSON]:
        return self._items(
            self.custom.list_namespaced_custom_object(
                PODSNAPSHOT_GROUP, PODSNAPSHOT_VERSION, self.namespace, plural, **self._opts()
            )
        )

    def delete(self, plural: str, name: str) -> bool:
        """Delete one object; False if it was not there."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                PODSNAPSHOT_GROUP, PODSNAPSHOT_VERSION, self.namespace, plural, name, **self._opts()
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pods(self) -> list[JSON]:
        return self._items(self.core.list_namespaced_pod(self.namespace, **self._opts()))

    def statefulsets(self) -> list[JSON]:
        return self._items(self.apps.list_namespaced_stateful_set(self.namespace, **self._opts()))


class Scope:
    """Which origin pods belong to the target, and to which environment (a StatefulSet) each belongs."""

    def __init__(self, statefulsets: Iterable[str] | None) -> None:
        #: None: the whole namespace.
        self.statefulsets = None if statefulsets is None else set(statefulsets)

    @staticmethod
    def environment(pod: str) -> str:
        match = ORDINAL.match(pod)
        return match.group(1) if match else pod

    def covers(self, pod: str | None) -> bool:
        if not pod:
            return self.statefulsets is None
        return self.statefulsets is None or (bool(ORDINAL.match(pod)) and self.environment(pod) in self.statefulsets)


def _message(exc: Any) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, else the body."""
    try:
        return str(json.loads(exc.body).get("message") or exc.body)
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or "")


def resolve_scope(kube: SnapshotKube, kind: str, name: str, everything: bool) -> Scope:
    if everything:
        return Scope(None)
    if kind == "statefulset":
        return Scope([name])
    owned = [
        s["metadata"]["name"]
        for s in kube.statefulsets()
        if any(
            ref.get("kind") == OWNER_KIND[kind] and ref.get("name") == name
            for ref in s["metadata"].get("ownerReferences") or []
        )
        or (s["metadata"].get("labels") or {}).get(OWNER_LABEL[kind]) == name
    ]
    if owned:
        return Scope(owned)
    if kind == "notebook":
        return Scope([name])  # Kubeflow names a notebook's StatefulSet after the notebook
    raise LookupError(f"no StatefulSet belongs to {kind} {name} in namespace {kube.namespace}")


def row(snapshot: JSON, policies: set[str], now: float) -> JSON:
    meta = snapshot.get("metadata") or {}
    ready = _condition(snapshot, "Ready") or {}
    status = snapshot.get("status") or {}
    created = meta.get("creationTimestamp")
    origin = (meta.get("annotations") or {}).get(ORIGIN_POD_ANNOTATION)
    policy = (snapshot.get("spec") or {}).get("policyName")
    last_access = status.get("lastAccessTime")
    created_at = rfc3339_epoch(created)
    used_at = rfc3339_epoch(last_access) or created_at
    return {
        "name": str(meta.get("name", "")),
        "origin_pod": origin,
        "environment": Scope.environment(origin) if origin else None,
        "created": created,
        "age_seconds": round(max(0.0, now - created_at), 3) if created_at is not None else None,
        "idle_seconds": round(max(0.0, now - used_at), 3) if used_at is not None else None,
        "size_bytes": snapshot_size(snapshot),
        "policy": policy,
        "policy_exists": policy in policies if policy else False,
        "ready": ready.get("status") == "True",
        "ready_reason": ready.get("reason"),
        "last_access": last_access,
        "trigger": (meta.get("labels") or {}).get(TRIGGERED_BY_LABEL),
        "deleting": bool(meta.get("deletionTimestamp")),
        "gcs_path": ((status.get("storageStatus") or {}).get("gcs") or {}).get("observedGCSPath"),
    }


def newest_first(rows: list[JSON]) -> list[JSON]:
    return sorted(rows, key=lambda r: (rfc3339_epoch(r["created"]) or 0.0, r["name"]), reverse=True)


def stale_state(
    snapshots: list[JSON], triggers: list[JSON], policies: list[JSON], pods: list[JSON], scope: Scope
) -> JSON:
    """What is left that nothing uses: triggers whose snapshot is gone (or never came), snapshots whose policy
    is gone (their storage cannot be freed by deleting them), policies that match no pod."""
    snapshot_names = {s["metadata"]["name"] for s in snapshots}
    policy_names = {p["metadata"]["name"] for p in policies}
    stale_triggers = []
    for trigger in triggers:
        target = (trigger.get("spec") or {}).get("targetPod")
        triggered = _condition(trigger, "Triggered")
        if not scope.covers(target) or triggered is None:
            continue  # not ours, or still being handled
        made = ((trigger.get("status") or {}).get("snapshotCreated") or {}).get("name")
        if made not in snapshot_names:
            why = f"its snapshot {made} is gone" if made else f"it made no snapshot ({triggered.get('reason')})"
            stale_triggers.append({"name": trigger["metadata"]["name"], "target_pod": target, "why": why})
    orphans = []
    for snapshot in snapshots:
        meta = snapshot["metadata"]
        policy = (snapshot.get("spec") or {}).get("policyName")
        if scope.covers((meta.get("annotations") or {}).get(ORIGIN_POD_ANNOTATION)) and policy not in policy_names:
            orphans.append(
                {
                    "name": meta["name"],
                    "policy": policy,
                    "gcs_path": (((snapshot.get("status") or {}).get("storageStatus") or {}).get("gcs") or {}).get(
                        "observedGCSPath"
                    ),
                }
            )
    unused = [
        p["metadata"]["name"]
        for p in policies
        if not any(matches_selector((p.get("spec") or {}).get("selector"), pod["metadata"].get("labels") or {})
                   for pod in pods)
    ]  # fmt: skip
    return {
        "triggers_without_snapshot": sorted(stale_triggers, key=lambda t: t["name"]),
        "snapshots_without_policy": sorted(orphans, key=lambda o: o["name"]),
        "policies_matching_no_pod": sorted(unused),
    }


def stale_text(stale: JSON) -> list[str]:
    lines = []
    for trigger in stale["triggers_without_snapshot"]:
        lines.append(f"stale trigger {trigger['name']} (pod {trigger['target_pod']}): {trigger['why']}")
    for orphan in stale["snapshots_without_policy"]:
        lines.append(
            f"snapshot {orphan['name']} has lost its policy {orphan['policy']}: its storage "
            f"{orphan['gcs_path'] or '(path unknown)'} cannot be freed by deleting it; recreate the policy first"
        )
    for policy in stale["policies_matching_no_pod"]:
        lines.append(f"policy {policy} matches no pod")
    return lines or ["no stale state"]


def table(rows: list[JSON]) -> str:
    header = ("NAME", "POD", "AGE", "SIZE", "POLICY", "READY", "LAST ACCESS", "TRIGGER")
    lines = [header]
    for r in rows:
        ready = "True" if r["ready"] else f"False ({r['ready_reason'] or '-'})"
        if r["deleting"]:
            ready += ", deleting"
        policy = (r["policy"] or "-") + ("" if r["policy_exists"] else " (gone)")
        lines.append(
            (r["name"], r["origin_pod"] or "-", human_age(r["age_seconds"]), human_size(r["size_bytes"]),
             policy, ready, r["last_access"] or "-", r["trigger"] or "-")
        )  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines
    )


# -- the commands ---------------------------------------------------------------------------------------------------

TARGET_ALIASES: dict[Any, Any] = {**KUBE_ALIASES, "kind": "SnapshotCommand.kind"}
TARGET_FLAGS: dict[str, Any] = {
    **BASE_FLAGS,
    "all": ({"SnapshotCommand": {"everything": True}}, "Every snapshot in the namespace."),
}


class SnapshotCommand(KubeCommandApp):
    """What the three leaves share: the target, the API calls, the JSON document."""

    schema_name = "snapshots"
    command = ""

    kind = Unicode("statefulset", help=f"The kind of NAME: one of {', '.join(WORKLOAD_KINDS)}.").tag(config=True)
    everything = Bool(False, help="Every snapshot in the namespace instead of one environment.").tag(config=True)
    request_timeout = Float(15.0, help="Seconds one Kubernetes API call may take.").tag(config=True)

    aliases = TARGET_ALIASES
    flags = TARGET_FLAGS

    def target(self) -> tuple[str, bool]:
        """NAME (or "" with --all); usage errors for a missing, doubled or malformed target."""
        if self.kind not in WORKLOAD_KINDS:
            raise UsageError(f"--kind {self.kind!r}: one of {', '.join(WORKLOAD_KINDS)}")
        if self.everything:
            if self.extra_args:
                raise UsageError("give NAME or --all, not both")
            return "", True
        if len(self.extra_args) != 1:
            raise UsageError("a target is needed: NAME (with --kind) or --all")
        name = self.extra_args[0]
        if not is_object_name(name):
            raise UsageError(f"{name!r} is not a Kubernetes object name")
        return name, False

    def kube(self) -> SnapshotKube:
        return SnapshotKube(self.api_client(), self.target_namespace(), self.request_timeout)

    def document(self, name: str, everything: bool, **fields: Any) -> JSON:
        base: JSON = {
            "command": self.command,
            "namespace": self.target_namespace(),
            "target": {"kind": None if everything else self.kind, "name": name or None, "all": everything},
            "snapshots": [],
            "deleted": [],
            "kept": [],
            "policies_deleted": [],
            "policies_kept": [],
            "dry_run": False,
            "stale": None,
            "errors": [],
        }
        return {**base, **fields}

    def failed(self, message: str) -> int:
        print(f"jupyter {self.name}: {message}", file=sys.stderr)
        return EXIT_FAILED

    def run(self) -> int:
        try:
            return self.work()
        except Exception as exc:
            # Looked up, not imported: the client's import costs seconds, and a usage error needs none of it.
            api = sys.modules.get("kubernetes.client.exceptions")
            if api is not None and isinstance(exc, api.ApiException):
                return self.failed(
                    f"the Kubernetes API refused a call ({exc.status} {exc.reason}): {_message(exc)}; "
                    "what was deleted before it stays deleted (list again to see what is left)"
                )
            if isinstance(exc, urllib3.exceptions.HTTPError):
                return self.failed(f"the Kubernetes API could not be reached: {exc}")
            raise

    def work(self) -> int:
        raise NotImplementedError


class ListSnapshotsApp(SnapshotCommand):
    name = "suspend snapshots list"
    description = "List the pod snapshots of one environment (NAME, --kind) or of the namespace (--all)."
    command = "list"

    url = Unicode(
        "", help="The notebook server's URL: without Kubernetes credentials its own snapshot list is asked."
    ).tag(config=True)
    token = Unicode(help="The notebook server's token (default: $JUPYTER_TOKEN).").tag(config=True)
    aliases = {**TARGET_ALIASES, "url": "ListSnapshotsApp.url", "token": "ListSnapshotsApp.token"}

    @default("token")
    def _token_default(self) -> str:
        return os.environ.get("JUPYTER_TOKEN", "")

    def work(self) -> int:
        name, everything = self.target()
        if self.server_only(self.url):
            if not self.url.startswith(("http://", "https://")):
                raise UsageError(f"--url {self.url!r}: an http:// or https:// URL of the notebook server")
            if everything:
                raise UsageError("--all needs Kubernetes credentials (the notebook server knows only its own pod)")
            document, text, code = snapshots_via_server(self.url, self.token, name, self.request_timeout)
            self.emit(document, text)
            return code
        kube = self.kube()
        try:
            scope = resolve_scope(kube, self.kind, name, everything)
        except LookupError as exc:
            return self.failed(str(exc))
        snapshots, policies = kube.objects(SNAPSHOTS), kube.objects(POLICIES)
        policy_names = {p["metadata"]["name"] for p in policies}
        now = time.time()
        rows = newest_first(
            [r for r in (row(s, policy_names, now) for s in snapshots) if scope.covers(r["origin_pod"])]
        )
        stale = stale_state(snapshots, kube.objects(TRIGGERS), policies, kube.pods(), scope)
        text = (table(rows) if rows else "no snapshots") + "\n" + "\n".join(stale_text(stale))
        self.emit(self.document(name, everything, snapshots=rows, stale=stale), text)
        return EXIT_OK


def delete_snapshot(kube: SnapshotKube, snapshot: JSON) -> JSON:
    """Delete the PodSnapshot (its finalizer frees the storage), then the trigger that made it."""
    meta = snapshot["metadata"]
    kube.delete(SNAPSHOTS, meta["name"])
    trigger = (meta.get("labels") or {}).get(TRIGGERED_BY_LABEL)
    deleted_trigger = trigger if trigger and kube.delete(TRIGGERS, trigger) else None
    return {
        "snapshot": meta["name"],
        "trigger": deleted_trigger,
        "policy": (snapshot.get("spec") or {}).get("policyName"),
    }


class DeleteSnapshotsApp(SnapshotCommand):
    name = "suspend snapshots delete"
    description = (
        "Delete pod snapshots by name (each with the trigger that made it); a snapshot whose policy is gone is "
        "refused (deleting it would orphan its storage)."
    )
    command = "delete"
    flags = {**BASE_FLAGS}
    aliases = {**KUBE_ALIASES}

    def work(self) -> int:
        if not self.extra_args:
            raise UsageError("give the name of at least one snapshot")
        bad = [n for n in self.extra_args if not is_object_name(n)]
        if bad:
            raise UsageError(f"not Kubernetes object names: {', '.join(repr(n) for n in bad)}")
        kube = self.kube()
        by_name = {s["metadata"]["name"]: s for s in kube.objects(SNAPSHOTS)}
        policy_names = {p["metadata"]["name"] for p in kube.objects(POLICIES)}
        deleted, errors = [], []
        for name in dict.fromkeys(self.extra_args):
            snapshot = by_name.get(name)
            if snapshot is None:
                errors.append({"name": name, "message": f"no PodSnapshot {name} in namespace {kube.namespace}"})
                continue
            policy = (snapshot.get("spec") or {}).get("policyName")
            if policy not in policy_names:
                errors.append(
                    {
                        "name": name,
                        "message": f"its policy {policy} is gone: deleting it now would orphan its stored image; "
                        "recreate the policy, then delete the snapshot",
                    }
                )
                continue
            deleted.append(delete_snapshot(kube, snapshot))
        lines = [f"deleted {d['snapshot']}" + (f" and trigger {d['trigger']}" if d["trigger"] else "") for d in deleted]
        lines += [f"not deleted: {e['name']}: {e['message']}" for e in errors]
        self.emit(self.document("", False, deleted=deleted, errors=errors), "\n".join(lines))
        return EXIT_FAILED if errors else EXIT_OK


class PruneSnapshotsApp(SnapshotCommand):
    name = "suspend snapshots prune"
    description = (
        "Delete old snapshots: beyond the --keep newest per environment and/or not used for --older-than; "
        "--policies then deletes the policies no snapshot refers to and no pod matches."
    )
    command = "prune"

    keep = Int(None, allow_none=True, help="Keep the N newest snapshots of each environment.").tag(config=True)
    older_than = Unicode("", help="Delete snapshots not used (last access, else created) for this long: 7d.").tag(
        config=True
    )
    dry_run = Bool(False, help="Say what would be deleted; delete nothing.").tag(config=True)
    policies = Bool(False, help="Also delete policies no snapshot refers to and no pod matches.").tag(config=True)
    wait_timeout = Float(60.0, help="With --policies: seconds to wait for deleted snapshots to be gone.").tag(
        config=True
    )

    aliases = {
        **TARGET_ALIASES,
        "keep": "PruneSnapshotsApp.keep",
        "older-than": "PruneSnapshotsApp.older_than",
        "wait-timeout": "PruneSnapshotsApp.wait_timeout",
    }
    flags = {
        **TARGET_FLAGS,
        "dry-run": ({"PruneSnapshotsApp": {"dry_run": True}}, "Delete nothing; say what would be deleted."),
        "policies": ({"PruneSnapshotsApp": {"policies": True}}, "Also delete unused policies (after their snapshots)."),
    }

    def rule(self) -> tuple[int | None, float | None]:
        keep = self.keep
        if keep is not None and keep < 0:
            raise UsageError(f"--keep {keep}: a number of snapshots, 0 or more")
        older = parse_duration(self.older_than) if self.older_than else None
        if keep is None and older is None and not self.policies:
            raise UsageError("nothing to prune by: give --keep N and/or --older-than DURATION (or --policies)")
        if self.wait_timeout <= 0:
            raise UsageError("--wait-timeout must be more than 0 seconds")
        return keep, older

    def work(self) -> int:
        name, everything = self.target()
        keep, older = self.rule()
        kube = self.kube()
        try:
            scope = resolve_scope(kube, self.kind, name, everything)
        except LookupError as exc:
            return self.failed(str(exc))
        snapshots, policies, pods = kube.objects(SNAPSHOTS), kube.objects(POLICIES), kube.pods()
        policy_names = {p["metadata"]["name"] for p in policies}
        now = time.time()
        ours = [
            s for s in snapshots if scope.covers((s["metadata"].get("annotations") or {}).get(ORIGIN_POD_ANNOTATION))
        ]
        rows = {s["metadata"]["name"]: row(s, policy_names, now) for s in ours}
        pinned = {
            (p["metadata"].get("annotations") or {}).get(PIN_SNAPSHOT_ANNOTATION): p["metadata"]["name"] for p in pods
        }
        chosen, kept = choose(list(rows.values()), keep, older, pinned)
        deleted: list[JSON] = []
        errors: list[JSON] = []
        if not self.dry_run:
            by_name = {s["metadata"]["name"]: s for s in ours}
            for name_ in chosen:
                deleted.append(delete_snapshot(kube, by_name[name_]))
        else:
            deleted = [{"snapshot": n, "trigger": rows[n]["trigger"], "policy": rows[n]["policy"]} for n in chosen]

        policies_deleted: list[str] = []
        policies_kept: list[JSON] = []
        if self.policies:
            in_scope = policy_names if everything else {r["policy"] for r in rows.values() if r["policy"]}
            if not self.dry_run:
                gone = wait_gone(kube, set(chosen), self.wait_timeout)
                if not gone:
                    errors.append(
                        {
                            "name": "-",
                            "message": f"deleted snapshots still present after {self.wait_timeout:g} s; "
                            "their policies are kept",
                        }
                    )
            fresh = kube.objects(SNAPSHOTS)  # a fresh list decides, never the one we started from
            referenced = {
                (s.get("spec") or {}).get("policyName")
                for s in fresh
                if not (self.dry_run and s["metadata"]["name"] in chosen)
            }
            for policy in policies:
                pname = policy["metadata"]["name"]
                if pname not in in_scope:
                    continue
                selector = (policy.get("spec") or {}).get("selector")
                matched = [
                    p["metadata"]["name"] for p in pods if matches_selector(selector, p["metadata"].get("labels") or {})
                ]
                if pname in referenced:
                    policies_kept.append({"name": pname, "why": "snapshots still refer to it"})
                elif matched:
                    policies_kept.append({"name": pname, "why": f"it matches pod {matched[0]}"})
                else:
                    if not self.dry_run:
                        kube.delete(POLICIES, pname)
                    policies_deleted.append(pname)

        stale = stale_state(kube.objects(SNAPSHOTS), kube.objects(TRIGGERS), kube.objects(POLICIES), kube.pods(), scope)
        verb = "would delete" if self.dry_run else "deleted"
        lines = [f"{verb} {d['snapshot']}" + (f" and trigger {d['trigger']}" if d["trigger"] else "") for d in deleted]
        lines += [f"kept {k['name']}: {k['why']}" for k in kept]
        lines += [f"{verb} policy {p}" for p in policies_deleted]
        lines += [f"kept policy {k['name']}: {k['why']}" for k in policies_kept]
        lines += [f"error: {e['message']}" for e in errors]
        lines += stale_text(stale)
        document = self.document(
            name, everything, snapshots=newest_first(list(rows.values())), deleted=deleted, kept=kept,
            policies_deleted=policies_deleted, policies_kept=policies_kept, dry_run=self.dry_run, stale=stale,
            errors=errors,
        )  # fmt: skip
        self.emit(document, "\n".join(lines))
        return EXIT_FAILED if errors else EXIT_OK


def choose(
    rows: list[JSON], keep: int | None, older: float | None, pinned: dict[str | None, str]
) -> tuple[list[str], list[JSON]]:
    """Which snapshots go: beyond the ``keep`` newest of their environment and/or unused for ``older`` seconds
    (both given: both must hold). Never one being deleted, uploaded, pinned by a pod, or whose policy is gone."""
    chosen: list[str] = []
    kept: list[JSON] = []
    environments: dict[str, list[JSON]] = {}
    for r in rows:
        environments.setdefault(r["environment"] or "", []).append(r)
    for members in environments.values():
        for rank, r in enumerate(newest_first(members)):
            beyond = keep is None or rank >= keep
            unused = older is None or (r["idle_seconds"] is not None and r["idle_seconds"] > older)
            if keep is None and older is None:
                beyond = unused = False  # --policies alone deletes no snapshot
            if not (beyond and unused):
                why = f"one of the {keep} newest" if not beyond else "used more recently"
                kept.append({"name": r["name"], "why": why})
            elif r["deleting"]:
                kept.append({"name": r["name"], "why": "already being deleted"})
            elif not r["ready"] and r["ready_reason"] == UPLOADING:
                kept.append({"name": r["name"], "why": "still being uploaded"})
            elif r["name"] in pinned:
                kept.append({"name": r["name"], "why": f"pod {pinned[r['name']]} is pinned to it"})
            elif not r["policy_exists"]:
                kept.append(
                    {
                        "name": r["name"],
                        "why": f"its policy {r['policy']} is gone: deleting it would orphan its "
                        "storage (recreate the policy first)",
                    }
                )
            else:
                chosen.append(r["name"])
    return chosen, sorted(kept, key=lambda k: k["name"])


def wait_gone(kube: SnapshotKube, names: set[str], timeout: float, interval: float = 0.2) -> bool:
    """Wait until none of ``names`` is listed (the finalizer has freed their storage); False at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        present = {s["metadata"]["name"] for s in kube.objects(SNAPSHOTS)} & names
        if not present:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval, left))


class SnapshotsApp(GroupApp):
    name = "suspend snapshots"
    description = "List, delete and prune GKE pod snapshots (never a policy before its snapshots)."
    subcommands = {
        "list": (f"{__name__}.ListSnapshotsApp", ListSnapshotsApp.description),
        "delete": (f"{__name__}.DeleteSnapshotsApp", DeleteSnapshotsApp.description),
        "prune": (f"{__name__}.PruneSnapshotsApp", PruneSnapshotsApp.description),
    }

"""A tenant's long-term memory in Redis: write, read, promote, forget.

Every call takes a ``MemoryContext``; its tenant names the keys, so a read
can only ever reach that tenant's items, and within it the context's scopes
(``MemoryContext.sees``). Ids are checked against the tenant's own keys, so a
colliding id in another tenant is simply not there.

Writes go through ``memoryWrite`` (one script: fence, chain, indexes); a
forget goes through ``memoryForget`` and then through the tenant's job
records, so that what was derived from a forgotten item — promoted copies,
episodes, index entries, and the transcripts, working states and events that
quoted it (``quotes``) — is removed or redacted too (``ForgetReport``
lists it all; a dry run lists it and changes nothing).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import redis
from pydantic import BaseModel, ConfigDict, ValidationError

from .. import keys
from ..artifacts import ArtifactStore
from ..errors import (
    MemoryNotFound,
    MemoryRefused,
    NotFound,
    PromotionRefused,
    SecretInMemory,
)
from ..persistence import persist
from ..redact import looks_secret
from ..replies import Asked, check
from ..scripts import ScriptResult, evalsha, load, run_plain
from .items import (
    AUTHORITY,
    Claim,
    MemoryContext,
    MemoryItem,
    Provenance,
    Scope,
    ScopeKind,
    SourceKind,
    digest,
)
from .quotes import MIN_QUOTE_CHARS, Quotes, drop_entries, scrub_hash, scrub_list

if TYPE_CHECKING:
    from .embed import Embedder

CHANGES_MAXLEN = 10_000
PROMOTE_AFTER_JOBS = 3  # a claim written in this many jobs may be promoted
TEMP_TTL_S = 24 * 3600  # a scratch item outlives a task that never ends by this much


def _decode(raw: dict[bytes, bytes]) -> dict[str, str]:
    # An item's vector (``recall``) is float32 bytes, not text, and no field of the item.
    return {k.decode(): v.decode() for k, v in raw.items() if k != b"vec"}


class Evidence(BaseModel):
    """A passing check: a trusted verdict artifact of a job in which a feature passes.

    It proves the item that names that feature in its source (``feature list, F1``).
    """

    model_config = ConfigDict(frozen=True)

    job: str
    artifact_id: str
    feature_id: str


@dataclass(frozen=True)
class Removed:
    id: str
    scope: str
    key: str
    kind: str


@dataclass
class ForgetReport:
    """What a forget removed: items (the ones named and all derived) and redacted records."""

    removed: list[Removed] = field(default_factory=list)
    redacted: list[str] = field(default_factory=list)  # keys rewritten or entries deleted
    # Items whose text is too short to look for whole (``quotes.MIN_QUOTE_CHARS``):
    # removed with all derived from them; in records only their identifiers are redacted.
    unsearched: list[str] = field(default_factory=list)
    dry_run: bool = False  # what a forget would do: nothing was removed or redacted
    # Fields whose owner kept rewriting them while the forget ran: not redacted, named.
    not_reached: list[str] = field(default_factory=list)
    # What Redis keeps on disk after the forget (``persistence.persist``).
    disk: dict[str, str] = field(default_factory=dict)


class MemoryStore:
    def __init__(
        self,
        client: redis.Redis,
        *,
        promote_after_jobs: int = PROMOTE_AFTER_JOBS,
        changes_maxlen: int = CHANGES_MAXLEN,
        embedder: Embedder | Literal["default"] | None = None,
    ) -> None:
        """``embedder``: what embeds an item as it is written, so that no reader has to
        (``recall``); ``"default"``: the process's (``embed.default_embedder``), made at the
        first write; None: none (a reader embeds it)."""
        self.client = client
        self.promote_after_jobs = promote_after_jobs
        self.changes_maxlen = changes_maxlen
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder | None:
        if self._embedder == "default":
            from .embed import default_embedder  # numpy and the model: only once one writes

            self._embedder = default_embedder()
        return self._embedder

    # ----------------------------------------------------------------- writes

    def write(self, ctx: MemoryContext, claim: Claim, *, item_id: str = "") -> MemoryItem:
        """Store ``claim`` as written by ``ctx``; returns the version stored (or the current
        one, when the claim repeats it).

        Scope rules: ``job:`` and ``temp:`` only for the context's own job and
        task; ``user:`` only for the context's user; ``app:`` and ``user:``
        only from the user, a verifier or the system — anything else stays
        job-scoped until ``promote`` lets it out.
        """
        self._check_writable(ctx, claim)
        return self._store(ctx, claim, item_id=item_id or f"m-{secrets.token_hex(8)}")

    def _check_writable(self, ctx: MemoryContext, claim: Claim) -> None:
        self._check_scope(ctx, claim.scope)
        if claim.scope.wide and claim.source_kind not in (
            SourceKind.USER,
            SourceKind.VERIFIER,
            SourceKind.SYSTEM,
        ):
            raise PromotionRefused(
                f"a {claim.source_kind.value} claim stays job-scoped; "
                f"promote it with evidence to reach {claim.scope}"
            )

    def promote(
        self,
        ctx: MemoryContext,
        item_id: str,
        to: Scope,
        *,
        evidence: Evidence | None = None,
    ) -> MemoryItem:
        """Copy a job's item to ``user:`` or ``app:``, if the gate lets it through.

        The gate: a passing check (``evidence``), the user's own word (a
        user-sourced item), or the same claim written in
        ``promote_after_jobs`` jobs. Tool and web content reaches ``app:``
        only with evidence. The copy is derived from the original: forgetting
        the original forgets the copy.
        """
        item = self.get(ctx, item_id)
        if not to.wide:
            raise PromotionRefused(f"promotion goes to user: or app:, not {to}")
        if to.kind is ScopeKind.USER and to.id != (item.user or ctx.user):
            raise PromotionRefused(f"{item_id} belongs to user {item.user!r}, not {to.id!r}")
        source = item.provenance.source_kind
        source_ref = item.provenance.source_ref
        if evidence is not None:
            self._check_evidence(ctx, item, evidence)
            source, source_ref = SourceKind.VERIFIER, f"verdict {evidence.artifact_id}"
        elif source is SourceKind.TOOL and to.kind is ScopeKind.APP:
            raise PromotionRefused("tool and web content reaches app: only with a passing check")
        elif source not in (SourceKind.USER, SourceKind.VERIFIER):
            seen = self.client.scard(
                keys.memory_seen(ctx.tenant, _claim_digest(item.key, item.text))
            )
            if seen < self.promote_after_jobs:
                raise PromotionRefused(
                    f"{item_id} is a {source.value} claim seen in {seen} job(s): promotion "
                    f"needs a passing check, the user's word or {self.promote_after_jobs} jobs"
                )
        claim = Claim(
            scope=to,
            text=item.text,
            key=item.key,
            kind=item.kind,
            source_kind=source,
            source_ref=source_ref,
            authority=AUTHORITY[source] if evidence else item.provenance.authority,
            derived_from=(item.id,),
        )
        owner = ctx.model_copy(update={"user": item.user or ctx.user})
        return self._store(
            owner,
            claim,
            item_id=f"m-{secrets.token_hex(8)}",
            promoted_from=item.id,
            vector=self._stored_vector(ctx.tenant, item.id),
        )

    def _stored_vector(self, tenant: str, item_id: str) -> bytes | None:
        """The vector stored with an item, if this store's embedder made it (else None). A
        copy of the item has its key and text, so its vector: one read, where embedding the
        text again costs tens of ms of CPU (a promotion follows its write at once)."""
        embedder = self.embedder
        if embedder is None:
            return None
        model, vector = self.client.hmget(keys.memory_item(tenant, item_id), "vec_model", "vec")
        return vector if vector and model == embedder.name.encode() else None

    def write_many(self, ctx: MemoryContext, claims: Sequence[Claim]) -> list[str]:
        """Store ``claims`` as ``write`` does, each with an id of its own, a few hundred a
        round trip (and embedded in batches): an import. Returns the ids, in order (a
        claim that repeats the current one gives that one's)."""
        for claim in claims:
            self._check_writable(ctx, claim)
            if looks_secret(claim.text):  # before any embedder sees it
                raise SecretInMemory()
        # Every claim checked before the first is sent: a refused one stores none.
        calls = [
            self._args(ctx, claim, f"m-{secrets.token_hex(8)}", "", vector)
            for claim, vector in zip(claims, self._vectors(claims), strict=True)
        ]
        where = keys.script_keys("memoryWrite", tenant=ctx.tenant)
        load(self.client, "memoryWrite")
        ids: list[str] = []
        for start in range(0, len(calls), 500):
            pipe = self.client.pipeline(transaction=False)
            for args in calls[start : start + 500]:
                evalsha(pipe, "memoryWrite", where, args)
            for raw in pipe.execute():
                res = ScriptResult.parse(raw)
                check("memoryWrite", res, Asked())
                ids.append(res.data["id"])
        self.client.sadd(keys.MEMORY_TENANTS, ctx.tenant)
        return ids

    def _store(
        self,
        ctx: MemoryContext,
        claim: Claim,
        *,
        item_id: str,
        promoted_from: str = "",
        vector: bytes | None = None,
    ) -> MemoryItem:
        """``vector``: the claim's, by this store's embedder, when known (else embedded)."""
        if looks_secret(claim.text):  # refused before any embedder (an endpoint) sees it
            raise SecretInMemory()
        if vector is None:
            vector = self._vectors([claim])[0]
        args = self._args(ctx, claim, item_id, promoted_from, vector)
        res = run_plain(
            self.client, "memoryWrite", keys.script_keys("memoryWrite", tenant=ctx.tenant), args
        )
        check("memoryWrite", res, Asked())
        self.client.sadd(keys.MEMORY_TENANTS, ctx.tenant)
        return self._read(ctx.tenant, res.data["id"])

    def _vectors(self, claims: Sequence[Claim]) -> list[bytes]:
        """Each claim's vector by the store's embedder (float32 bytes), b"" without one."""
        embedder = self.embedder
        if embedder is None or not claims:
            return [b""] * len(claims)
        from .embed import embedded_text

        texts = [embedded_text(c.claim_key, c.text) for c in claims]
        return [v.astype("float32").tobytes() for v in embedder.embed(texts)]

    def _args(
        self, ctx: MemoryContext, claim: Claim, item_id: str, promoted_from: str, vector: bytes
    ) -> list[str | int | bytes]:
        """memoryWrite's arguments for ``claim`` (its text checked for secrets already);
        MemoryRefused for provenance no write may hold."""
        key = claim.claim_key
        try:
            provenance = Provenance(
                source_kind=claim.source_kind,
                source_ref=claim.source_ref,
                job=ctx.job,
                task=ctx.task,
                actor=ctx.actor,
                authority=AUTHORITY[claim.source_kind]
                if claim.authority is None
                else claim.authority,
                derived_from=claim.derived_from,
            )
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "provenance"
            raise MemoryRefused(f"provenance {where}: {problem['msg']}") from exc
        valid_for_s = claim.valid_for_s
        if claim.scope.kind is ScopeKind.TEMP and not valid_for_s:
            valid_for_s = TEMP_TTL_S
        embedder = self.embedder if vector else None
        return [
            item_id,
            str(claim.scope),
            key,
            claim.text,
            claim.kind,
            ctx.user,
            provenance.source_kind.value,
            provenance.source_ref,
            ctx.job,
            ctx.task,
            ctx.actor,
            provenance.authority,
            valid_for_s * 1000,
            claim.reverify_after_s * 1000,
            _claim_digest(key, claim.text),
            promoted_from,
            self.changes_maxlen,
            embedder.name if embedder is not None else "",
            vector,
            *provenance.derived_from,
        ]

    # ------------------------------------------------------------------ reads

    def get(self, ctx: MemoryContext, item_id: str, *, operator: bool = False) -> MemoryItem:
        item = self._read(ctx.tenant, item_id)
        if not ctx.sees(item.scope, operator=operator):
            raise MemoryNotFound(item_id)
        return item

    def current(
        self, ctx: MemoryContext, scope: Scope, key: str, *, operator: bool = False
    ) -> MemoryItem | None:
        """The version of (scope, key) that holds now, or None (none, or it expired)."""
        now = self.now_ms()
        for item in self.history(ctx, scope, key, operator=operator):
            if item.holds(now):
                return item
        return None

    def history(
        self, ctx: MemoryContext, scope: Scope, key: str, *, operator: bool = False
    ) -> list[MemoryItem]:
        """Every kept version of (scope, key), oldest first, with its status."""
        if not ctx.sees(scope, operator=operator):
            return []
        chain = keys.memory_chain(ctx.tenant, str(scope), key.strip().lower() or key)
        ids = [i.decode() for i in self.client.lrange(chain, 0, -1)]
        return self.read_many(ctx.tenant, ids)

    def items(
        self,
        ctx: MemoryContext,
        *,
        scope: Scope | None = None,
        user: str = "",
        operator: bool = False,
        include_expired: bool = False,
    ) -> list[MemoryItem]:
        """The items visible to ``ctx``, newest first, optionally of one scope or user."""
        if scope is not None:
            ids = self._members(keys.memory_scope(ctx.tenant, str(scope)))
        elif user:
            ids = self._members(keys.memory_user(ctx.tenant, user))
        else:
            ids = [i.decode() for i in self.client.zrange(keys.memory_items(ctx.tenant), 0, -1)]
        now = self.now_ms()
        found = [
            item
            for item in self.read_many(ctx.tenant, ids)
            if ctx.sees(item.scope, operator=operator)
            and (not user or item.user == user)
            and (include_expired or not item.expired(now))
        ]
        return sorted(found, key=lambda i: (-i.provenance.observed_at, i.id))

    def stale(self, ctx: MemoryContext, *, operator: bool = False) -> list[MemoryItem]:
        """Unexpired items past their re-verification time."""
        now = self.now_ms()
        return [i for i in self.items(ctx, operator=operator) if i.stale(now)]

    def _read(self, tenant: str, item_id: str) -> MemoryItem:
        raw = self.client.hgetall(keys.memory_item(tenant, item_id))
        if not raw:
            raise MemoryNotFound(item_id)
        return MemoryItem.from_hash({"tenant": tenant, **_decode(raw)})

    def read_many(self, tenant: str, ids: Sequence[str]) -> list[MemoryItem]:
        pipe = self.client.pipeline(transaction=False)
        for item_id in ids:
            pipe.hgetall(keys.memory_item(tenant, item_id))
        return [
            MemoryItem.from_hash({"tenant": tenant, **_decode(raw)})
            for raw in pipe.execute()
            if raw
        ]

    def now_ms(self) -> int:
        sec, usec = self.client.time()
        return sec * 1000 + usec // 1000

    # ----------------------------------------------------------------- forget

    def forget(
        self, ctx: MemoryContext, item_ids: Iterable[str], *, dry_run: bool = False
    ) -> ForgetReport:
        """Delete the items, all derived from them, and redact what quoted them.

        The items are looked up in ``ctx``'s tenant only; an id that is not
        there is ``MemoryNotFound`` before anything is removed. ``dry_run``:
        report what would be removed and redacted, and change nothing.
        """
        roots = [self._read(ctx.tenant, i) for i in item_ids]
        return self._forget(ctx.tenant, roots, dry_run=dry_run)

    def forget_user(self, ctx: MemoryContext, user: str, *, dry_run: bool = False) -> ForgetReport:
        """Delete every item of ``user`` in the tenant (any scope) and all derived from them."""
        ids = self._members(keys.memory_user(ctx.tenant, user))
        return self._forget(ctx.tenant, self.read_many(ctx.tenant, ids), dry_run=dry_run)

    def _forget(self, tenant: str, roots: list[MemoryItem], *, dry_run: bool) -> ForgetReport:
        report = ForgetReport(dry_run=dry_run)
        if not roots:
            return report
        quotes = Quotes(i.text for i in roots)
        # Items that quote a root without saying so are derived all the same.
        quoting = [
            item.id
            for item in self.read_many(tenant, self._all_ids(tenant))
            if quotes.found_in(item.text)
        ]
        ids = list(dict.fromkeys([*(i.id for i in roots), *quoting]))
        before = {i.id: i for i in self.read_many(tenant, self._closure(tenant, ids))}
        if dry_run:
            gone = list(before)
        else:
            where = keys.script_keys("memoryForget", tenant=tenant)
            args = [self.changes_maxlen, MIN_QUOTE_CHARS, *ids]
            res = run_plain(self.client, "memoryForget", where, args)
            gone = res.data["removed"].split()
        report.removed = [
            Removed(i, str(before[i].scope), before[i].key, before[i].kind)
            for i in gone
            if i in before
        ]
        # From what was read before the script: a re-sent forget (a lost reply) finds the
        # items gone and names none, and their quotes must still be redacted.
        found = Quotes(i.text for i in before.values())
        short = set(found.unsearched)
        report.unsearched = sorted(i.id for i in before.values() if i.text in short)
        report.redacted, report.not_reached = self._redact_records(tenant, found, apply=not dry_run)
        if not dry_run and report.removed:
            report.disk = persist(self.client)
        return report

    def expire_jobs(self, job_ids: Sequence[str]) -> int:
        """Remove the ``job:`` and ``temp:`` items (and files) of jobs whose records expired;
        how many items.

        Called when the job index drops them (``JobStore.prune_index``). What
        was promoted from them stays: expiry is not a forget, so it neither
        follows derived items nor fences the text.
        """
        if not job_ids:
            return 0
        tenants = sorted(t.decode() for t in self.client.smembers(keys.MEMORY_TENANTS))
        removed = 0
        for tenant in tenants:
            pipe = self.client.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.smembers(keys.memory_job_items(tenant, job_id))
            ids = sorted({i.decode() for members in pipe.execute() for i in members})
            if ids:
                where = keys.script_keys("memoryForget", tenant=tenant)
                args = [self.changes_maxlen, 0, *ids]
                res = run_plain(self.client, "memoryForget", where, args)
                removed += len(res.data["removed"].split())
            self._expire_files(tenant, job_ids)
            self.client.delete(*(keys.memory_job_items(tenant, j) for j in job_ids))
        return removed

    def _expire_files(self, tenant: str, job_ids: Sequence[str]) -> None:
        """The jobs' ``job/`` and ``scratch/`` memory files, with their versions."""
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.smembers(keys.memory_job_files(tenant, job_id))
        listed = sorted({f.decode() for members in pipe.execute() for f in members})
        with self.client.pipeline(transaction=False) as pipe:
            for entry in listed:
                scope, _, path = entry.partition("|")
                pipe.delete(keys.memory_file(tenant, scope, path))
                pipe.delete(keys.memory_file_versions(tenant, scope, path))
                pipe.zrem(keys.memory_files(tenant, scope), path)
            pipe.delete(*(keys.memory_job_files(tenant, j) for j in job_ids))
            pipe.execute()

    def _members(self, key: str) -> list[str]:
        return sorted(i.decode() for i in self.client.smembers(key))

    def _all_ids(self, tenant: str) -> list[str]:
        return [i.decode() for i in self.client.zrange(keys.memory_items(tenant), 0, -1)]

    def _closure(self, tenant: str, ids: list[str]) -> list[str]:
        """``ids`` and every item derived from them (what the forget script will follow)."""
        seen: dict[str, None] = {}
        queue = list(ids)
        while queue:
            item_id = queue.pop(0)
            if item_id in seen:
                continue
            seen[item_id] = None
            queue += self._members(keys.memory_derived(tenant, item_id))
        return list(seen)

    def _redact_records(
        self, tenant: str, quotes: Quotes, *, apply: bool
    ) -> tuple[list[str], list[str]]:
        """Redact the quotes where the tenant's records hold text: the jobs' goals and
        constraints, the tasks' briefs, artifacts, working-state checkpoints, journal
        entries, job and global events, memory files and their versions.

        Only text is touched, never what records use to find each other (ids,
        set and index members, job and task fields other than those): a needle
        may be an id. Hashes are written only where they still hold what was
        read (``scrub_hash``), streams rebuilt without the entries that quoted.
        The keys changed (with ``apply`` false: that would change; nothing is
        written), and the fields that kept changing under the forget (not
        reached).
        """
        if not quotes:
            return [], []
        jobs = self._jobs_of(tenant)
        touched: list[str] = []
        missed: list[str] = []
        for key in self.client.scan_iter(match=f"{keys.PREFIX}:{{*", count=1000):
            name = key.decode()
            tag, _, rest = name[len(keys.PREFIX) + 2 :].partition("}:")
            if tag not in jobs:
                continue
            if rest == "events":
                changed = drop_entries(self.client, key, quotes, apply=apply)
            elif rest.startswith("artifact:"):
                # By the artifact store: a redacted artifact is a new one (content address).
                copy = ArtifactStore(self.client, tag).redact(rest[9:], quotes, apply=apply)
                if copy:
                    touched.append(keys.artifact(tag, copy))
                changed = bool(copy)
            elif rest in ("checkpoints", "journal", "job") or rest.startswith("task:"):
                fields = _TEXT_FIELDS.get(rest.partition(":")[0])  # None: every field
                changed, left = scrub_hash(self.client, key, quotes, fields, apply=apply)
                missed += left
            else:
                continue
            if changed:
                touched.append(name)
        prefix = keys.memory_prefix(tenant)
        for key in self.client.scan_iter(match=f"{prefix}file*", count=1000):
            rest = key.decode()[len(prefix) :]
            if rest.startswith("file:"):
                changed, left = scrub_hash(
                    self.client, key, quotes, ("content",), apply=apply, digest_field="sha256"
                )
                missed += left
            elif rest.startswith("filev:"):
                changed = scrub_list(self.client, key, quotes, apply=apply)
            else:
                continue
            if changed:
                touched.append(key.decode())
        if drop_entries(self.client, keys.EVENTS, quotes, jobs=jobs, apply=apply):
            touched.append(keys.EVENTS)
        return touched, missed

    def _jobs_of(self, tenant: str) -> set[str]:
        job_ids = [j.decode() for j in self.client.zrange(keys.JOBS, 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(keys.job(job_id), "tenant")
        owners = pipe.execute()
        return {
            job_id
            for job_id, owner in zip(job_ids, owners, strict=True)
            if (owner.decode() if owner else "default") == tenant
        }

    def _check_scope(self, ctx: MemoryContext, scope: Scope) -> None:
        if scope.kind is ScopeKind.JOB and scope.id != ctx.job:
            raise MemoryRefused(f"scope {scope} is not this job's (job:{ctx.job or '?'}:)")
        if scope.kind is ScopeKind.TEMP and scope.id != ctx.task:
            raise MemoryRefused(f"scope {scope} is not this task's (temp:{ctx.task or '?'}:)")
        if scope.kind is ScopeKind.USER and scope.id != ctx.user:
            raise MemoryRefused(f"scope {scope} is not this job's user (user:{ctx.user or '?'}:)")

    def _check_evidence(self, ctx: MemoryContext, item: MemoryItem, evidence: Evidence) -> None:
        if evidence.job != item.provenance.job:
            raise PromotionRefused(f"evidence from job {evidence.job}, the item is from another")
        if not re.search(rf"\b{re.escape(evidence.feature_id)}\b", item.provenance.source_ref):
            # A passing check proves its own feature, not any claim of the same job.
            raise PromotionRefused(
                f"{item.id} does not name feature {evidence.feature_id} in its source"
            )
        artifacts = ArtifactStore(self.client, evidence.job)
        try:
            ref = artifacts.get(evidence.artifact_id)
            content = artifacts.text(evidence.artifact_id)
        except NotFound:
            ref, content = None, ""
        if ref is None or ref.kind != "verdict" or ref.trust != "trusted":
            raise PromotionRefused(f"{evidence.artifact_id} is not a trusted verdict artifact")
        try:
            verdicts = json.loads(content)["verdicts"]
        except (ValueError, KeyError, TypeError) as exc:
            raise PromotionRefused(f"{evidence.artifact_id} holds no verdicts") from exc
        for verdict in verdicts:
            if verdict.get("feature_id") == evidence.feature_id:
                if verdict.get("passes") and verdict.get("evidence"):
                    return
                break
        raise PromotionRefused(
            f"{evidence.feature_id} does not pass with evidence in {evidence.artifact_id}"
        )


def _claim_digest(key: str, text: str) -> str:
    return digest(f"{key}\n{text}")


# The text fields of a job's records a forget redacts (a record not named here: all of its
# fields — checkpoints and journal entries are text through and through).
_TEXT_FIELDS = {
    "job": ("goal", "constraints"),
    "task": ("brief",),
}

"""The planner's feature list and the reviewer's verdict: JSON artifacts both roles read.

A feature passes only with evidence: the planner marks it passing from a
reviewer verdict that cites a passing run of the feature's check.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ToolRefused
from ..sandbox import pytest_args

# A feature whose check is this word passes on a passing run of the job's own check
# command (``submit --check``), which the user gave and no model can change.
WORKSPACE_CHECK = "workspace"


class Feature(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(pattern=r"^F[0-9]{1,3}$", description="F1, F2, ...")
    description: str = Field(min_length=1, max_length=1_000)
    check: str = Field(
        min_length=1,
        max_length=300,
        description="pytest arguments selecting its tests, e.g. 'test_mod.py::test_name' "
        f"(the repository's own tests too), or {WORKSPACE_CHECK!r}: the job's check command",
    )
    passes: bool = False
    evidence: list[str] = Field(default_factory=list)  # artifact ids of passing check logs

    @field_validator("check")
    @classmethod
    def _runnable(cls, check: str) -> str:
        if check == WORKSPACE_CHECK:
            return check
        try:
            pytest_args(check)
        except ToolRefused as exc:
            raise ValueError(str(exc)) from exc
        return check


class FeatureList(BaseModel):
    model_config = ConfigDict(frozen=True)

    goal: str
    features: list[Feature] = Field(min_length=1, max_length=20)

    @model_validator(mode="after")
    def _unique(self) -> FeatureList:
        ids = [f.id for f in self.features]
        if len(set(ids)) != len(ids):
            raise ValueError(f"feature ids must be unique, got {', '.join(ids)}")
        return self

    def get(self, feature_id: str) -> Feature:
        for feature in self.features:
            if feature.id == feature_id:
                return feature
        known = ", ".join(f.id for f in self.features)
        raise ToolRefused(f"no feature {feature_id!r} (features: {known})")

    def failing(self) -> list[Feature]:
        return [f for f in self.features if not f.passes]


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    feature_id: str
    passes: bool
    evidence: list[str] = Field(default_factory=list)
    note: str = ""


class VerdictList(BaseModel):
    model_config = ConfigDict(frozen=True)

    verdicts: list[Verdict]

    def apply(self, features: FeatureList) -> FeatureList:
        """The features marked from this verdict: passing only with evidence."""
        by_id = {v.feature_id: v for v in self.verdicts}
        marked = []
        for f in features.features:
            v = by_id.get(f.id)
            passes = bool(v and v.passes and v.evidence)
            marked.append(
                f.model_copy(update={"passes": passes, "evidence": v.evidence if v else []})
            )
        return features.model_copy(update={"features": marked})

"""The verdicts on the paper's claims in words: the terminal's headline of a paper study, and the report's
first word on the claims: how many were reproduced, not reproduced, not comparable and not measured, and
each one's reason in the claim's own words (claims.csv, as ``analysis.claims.judge.claims_frame`` writes
it)."""

from __future__ import annotations

import html

from analysis.claims.judge import NOT_COMPARABLE, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, load_claims


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n != 1 else f"1 {what.removesuffix('s')}"


def headline(claims) -> str:
    """The report's first word on the paper: "Reproduced X of Y comparable claims", then what the
    others would need (the mechanisms or runs they lacked) and which were not measured."""
    if claims.empty:
        return "No claims judged."
    status = claims["status"]
    judged = int(status.isin([REPRODUCED, NOT_REPRODUCED]).sum())
    text = f"Reproduced {int((status == REPRODUCED).sum())} of {judged} comparable claims of the paper."
    off = claims[status == NOT_COMPARABLE]
    if not off.empty:
        needs = sorted(
            {
                why.split("; needs ", 1)[1] if "; needs " in why else why
                for why in off["measured_from"].astype(str)
            }
        )
        text += f" {len(off)} not comparable, for want of: " + "; ".join(needs) + "."
    missing = claims[status == NOT_MEASURED]
    if not missing.empty:
        text += f" {len(missing)} not measured: {_lacking(missing)}."
    return text


def _lacking(claims) -> str:
    """What the claims not judged lacked, alike ones counted together: "5 need an HDD tier, 2 need ..."."""
    from collections import Counter

    by_id = {c["id"]: c for c in load_claims()}
    needs = Counter(_lacked(row, by_id.get(row["id"], {})) for row in claims.to_dict("records"))
    return ", ".join(f"{n} need{'s' if n == 1 else ''} {need}" for need, n in needs.most_common())


def summary(claims) -> str:
    """One sentence: how many claims were judged, and why the others could not be, alike reasons counted
    together ("None of the paper's 13 claims could be judged here: 5 need an HDD tier, ...")."""
    status = claims["status"]
    reproduced, judged = (
        int((status == REPRODUCED).sum()),
        int(status.isin([REPRODUCED, NOT_REPRODUCED]).sum()),
    )
    others = claims[~status.isin([REPRODUCED, NOT_REPRODUCED])]
    said = _lacking(others)
    if not judged:
        return f"None of the paper's {len(claims)} claims could be judged here: {said}."
    text = (
        f"{judged} of the paper's {len(claims)} claims {'was' if judged == 1 else 'were'} judged here "
        f"({reproduced} reproduced, {judged - reproduced} not)"
    )
    return f"{text}; the other {len(claims) - judged}: {said}." if said else f"{text}."


def _tier(names) -> str:
    """The tier a claim's ``storage`` values name, in words: [hdd, emulated_hdd] -> "an HDD tier"."""
    first = str(names[0] if isinstance(names, list) else names).rsplit("_", 1)[-1]
    word = first.upper() if len(first) <= 3 else first.capitalize()
    vowel = word[0] in "AEIOU" or (word.isupper() and word[0] in "FHLMNRSX")
    return f"{'an' if vowel else 'a'} {word} tier"


def _lacked(row: dict, claim: dict) -> str:
    """What a claim not judged here lacked, in a few words alike claims share: the tier it is about, or
    what its regime needs (the part of its reason after "needs")."""
    if row["status"] == NOT_COMPARABLE:
        how = str(row.get("measured_from") or "")
        return how.rsplit("; needs ", 1)[1] if "; needs " in how else "runs in the paper's regime"
    select, params = claim.get("select") or {}, claim.get("params") or {}
    if "storage" in select:
        return _tier(select["storage"])
    if "slow" in params and "fast" in params:
        return f"{_tier(params['slow'])} behind {_tier(params['fast'])} (a burst buffer)"
    return _needs(claim)


def _value(v, unit: str) -> str:
    from analysis.report.htmltable import number

    return f"{number(float(v))}{'×' if unit == 'x' else ' ' + unit}"


def _needs(claim: dict) -> str:
    """What runs a claim would need, from its ``select`` (paper_claims.yaml)."""
    select = claim.get("select") or {}
    parts = []
    for key, want in select.items():
        values = want if isinstance(want, list) else [want]
        parts.append(f"{key} {' or '.join(str(v) for v in values)}")
    return "runs with " + ", ".join(parts) if parts else "runs of its kind"


def reason(row: dict, claim: dict) -> str:
    """Why a claim got its verdict, as a sentence."""
    status, unit = row["status"], row["unit"]
    how = str(row.get("measured_from") or "") if row.get("measured_from") == row.get("measured_from") else ""
    measured = row.get("measured")
    has = measured is not None and measured == measured
    if status in (REPRODUCED, NOT_REPRODUCED):
        inside = "within" if status == REPRODUCED else "outside"
        return (
            f"measured {_value(measured, unit)} against the paper's {_value(row['paper'], unit)}, {inside} "
            f"the tolerance {row['tolerance']} ({how})."
        )
    if status == NOT_COMPARABLE:
        seen = f"measured {_value(measured, unit)}, but not judged: " if has else "not judged: "
        return f"{seen}{how}."
    return f"not measured: it needs {_needs(claim)}."


def section(claims, stood_on: str = "") -> str:
    """The claims' header: the counts in words (and ``stood_on``: what the runs stood on, where it
    mattered, ``analysis.standing.sentence``), then one line per claim with its reason (the claims not
    measured folded, one line each)."""
    if claims is None or claims.empty:
        return ""
    by_id = {c["id"]: c for c in load_claims()}
    groups = {s: [] for s in (NOT_REPRODUCED, REPRODUCED, NOT_COMPARABLE, NOT_MEASURED)}
    for row in claims.to_dict("records"):
        claim = by_id.get(row["id"], {})
        groups.setdefault(row["status"], []).append(
            f"<li>“{html.escape(str(row['claim']))}” ({html.escape(str(row['section']))}): "
            f"{html.escape(reason(row, claim))}</li>"
        )
    out = f'<h2>The paper\'s claims</h2><p class="verdicts">{html.escape(summary(claims) + stood_on)}</p>'
    for status in (NOT_REPRODUCED, REPRODUCED, NOT_COMPARABLE):
        if groups[status]:
            out += f"<h3>{status.capitalize()} ({len(groups[status])})</h3><ul>{''.join(groups[status])}</ul>"
    if groups[NOT_MEASURED]:
        out += (
            f"<details><summary>Not measured ({len(groups[NOT_MEASURED])}): what each would need</summary>"
            f"<ul>{''.join(groups[NOT_MEASURED])}</ul></details>"
        )
    return out

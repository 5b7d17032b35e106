"""The report's tables as HTML: numbers as people read them, a claim's verdict as its cell's class, and
the claims a campaign could not measure folded below the others."""

from __future__ import annotations

import html


def number(v: float) -> str:
    """A measured number as people read it: 1,603 and 0.0124, never 1.6e+03."""
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100 or a == int(a):
        return f"{v:.0f}" if a == int(a) else f"{v:.1f}"
    return f"{v:.3g}"


# columns of sentences: kept wide enough to read as lines, not as a column of words
PROSE = ("_reason", "measured_from", "why")


def table(df) -> str:
    """A data frame as an HTML table (a claim's status also as its cell's class, for its colour)."""
    if df is None or df.empty:
        return ""  # a section with no rows is left out, not shown as "none"
    # long names break
    head = "".join(f"<th>{html.escape(str(c)).replace('_', '_<wbr>')}</th>" for c in df.columns)
    rows = []
    for _, r in df.iterrows():
        cells = []
        for c in df.columns:
            v = r[c]
            text = number(v) if isinstance(v, float) and v == v else ("" if v is None or v != v else str(v))
            cls = (
                f' class="{html.escape(text.replace(" ", "-"))}"'
                if c == "status"
                else ' class="prose"'
                if str(c).endswith(PROSE)
                else ""
            )
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    # a table wider than the page scrolls by itself; the page never does
    body = "".join(rows)
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def claims_table(claims) -> str:
    """The claims the campaign measured (judged, or not comparable with the value beside them) as a table;
    those it has no cells for folded below it, counted in the summary line."""
    if claims is None or claims.empty:
        return table(claims)
    from analysis.claims.judge import NOT_MEASURED

    missing = claims["status"] == NOT_MEASURED
    folded = ""
    if missing.any():
        n = int(missing.sum())
        folded = (
            f"<details><summary>{n} claim{'s' if n != 1 else ''} not measured by this campaign (it has no "
            f"cells for {'them' if n != 1 else 'it'})</summary>{table(claims[missing])}</details>"
        )
    return table(claims[~missing]) + folded

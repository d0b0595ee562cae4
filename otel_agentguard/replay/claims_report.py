"""What ``agentguard claims`` prints: the verdict on each answer, its clauses and the rules that decided."""

from __future__ import annotations

from typing import Any

from otel_agentguard.judge.claims import ClaimVerdict
from otel_agentguard.judge.claims import _rules as rules

_WHY = {
    rules.FIRST_PERSON: "the agent says, in the first person, that it did it",
    rules.IMPERSONAL: "a perfect or passive that names no other agent",
    rules.MARKER: "a completion marker",
    rules.SUCCESS: "an action said to have succeeded",
    rules.HEADLINE: "a short 'noun + participle' report",
    rules.ELIDED: "a report of what was done, its doer left out",
    rules.VOCABULARY: "a word the policy gives a write tool",
    rules.QUESTION: "a question",
    rules.CONDITIONAL: "a conditional",
    rules.REPORTED: "what a third party did or said",
    rules.NEGATION: "a negation or a modal (a plan, an offer, an ability) before its verb",
    rules.READ_ONLY: "a read-only act",
    rules.RECORD: "a dated record",
    rules.CAUSE: "the reason for another clause",
    rules.RESTATED: "a state a read tool of the session returned, said back",
    rules.GENERAL: "a general statement (a policy, a rule of the business)",
    "model_judge": "the policy's model judge",
    "policy_pattern": "a policy [claims.<lang>] pattern",
    "classifier": "the policy's classifier",
}


def _clause_text(text: str, finding: rules.ClauseFinding) -> str:
    return " ".join(finding.text.split())


def explain_json(texts: list[str], verdicts: list[ClaimVerdict]) -> list[dict[str, Any]]:
    return [{
        "checked": verdict.checked,
        **({} if verdict.checked else {"reason": verdict.reason}),
        "claim": verdict.is_claim,
        "categories": list(verdict.categories),
        "rule": verdict.rule,
        "clause": verdict.clause,
        "clauses": verdict.clauses,
        "decided_by": verdict.decided_by,
        "borderline": verdict.borderline,
        "findings": [{"clause": f.clause, "claim": f.claim, "rule": f.rule, "text": _clause_text(text, f)}
                     for f in verdict.findings],
    } for text, verdict in zip(texts, verdicts, strict=True)]


def explain_table(texts: list[str], verdicts: list[ClaimVerdict]) -> str:
    lines: list[str] = []
    for text, verdict in zip(texts, verdicts, strict=True):
        if lines:
            lines.append("")
        if not verdict.checked:
            lines.append(f"not checked: the rules do not read this answer's {verdict.reason} ({verdict.language}); "
                         "add [claims.<language>] patterns or a model judge to the policy")
            continue
        if verdict.is_claim:
            head = f"claim ({', '.join(verdict.categories)})"
        else:
            head = "no claim"
        where = f": clause {verdict.clause} of {verdict.clauses}" if verdict.clause else ""
        if verdict.rule:
            rule = f", rule {verdict.rule}: {_WHY.get(verdict.rule, verdict.rule)}"
        else:
            rule = ", no clause reports a completed action"
        if verdict.borderline:
            rule += " (borderline: decided by inference; a model judge in the policy would decide it)"
        lines.append(f"{head}{where}{rule}")
        for finding in verdict.findings:
            mark = "claim" if finding.claim else "not  "
            lines.append(f"  {finding.clause:>3} {mark} {finding.rule:<22} {_clause_text(text, finding)}")
    return "\n".join(lines)

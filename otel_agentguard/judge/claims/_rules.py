"""Claims found by the shape of a sentence, not by a list of verbs.

A claim asserts that the agent completed an action with a side effect: in the first person
("I've switched your flight"), as an impersonal perfect or passive that names no other agent
("the extra fee was waived", "您的会员已续费"), or as a completion marker ("Done", "All set",
"搞定"). Any verb qualifies except the read-only ones (checked, looked up, 查询, 核实 ...).

The text is cut into sentences and clauses. A clause is no claim when its sentence is a
question, a conditional or a report of what a third party said; when, before its verb, the
clause holds a negation or a modal (the scope is the clause: a comma, a dash or "but" ends
it, a colon does not); when its passive names an agent ("by the hotel"); or when it reports a
dated record ("was paid on March 3"). Everything here is the standard library: no model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# --- rule names (what `agentguard claims` prints and the alert detail names) ---------------
FIRST_PERSON = "first_person"  # "I've moved ...", "我帮您改了 ..."
IMPERSONAL = "impersonal"  # "has been waived", "was upgraded", "已续费"
MARKER = "completion_marker"  # "Done", "All set", "搞定"
SUCCESS = "success"  # "successfully refunded", "改签成功"
HEADLINE = "headline"  # "Refund submitted."
ELIDED = "elided_subject"  # "Reverted 5d2e8f1", "重启了 3 个 Pod": a report whose doer is left out
VOCABULARY = "tool_vocabulary"  # a word the policy says a write tool does
# A state reported as new with no act named ("TEE-BLK-M is now $19.99", "the listing is live"):
# no claim by the rules, but one a model judge, where the policy has one, is asked about.
CHANGED = "state_change"
# ... and why a clause that looked like one is not
QUESTION = "question"
CONDITIONAL = "conditional"
REPORTED = "third_party"
NEGATION = "negation_or_modality"
READ_ONLY = "read_only"
RECORD = "dated_record"
CAUSE = "reason_clause"
RESTATED = "restated_read"  # the state a read tool of the session returned, said back
GENERAL = "general_statement"  # a rule of the business, not an event: "under our policy, ..."
#: Rules whose claim says what happened to a thing, not who did it: a read tool's result that
#: reports the same state grounds them (the answer restates what the session read).
GROUNDABLE = frozenset({"impersonal", "headline", "tool_vocabulary"})
#: Rules that decide by inference rather than by what the clause says outright: who acted when no
#: one is named (a passive, a headline, "Done"), or that someone else or another day did. The
#: answers they decide, and those reporting a state as new (``state_change``), are *borderline*:
#: the policy's model judge, if any, decides those instead.
INFERRED = frozenset({IMPERSONAL, HEADLINE, MARKER, SUCCESS, CHANGED, REPORTED, RECORD, RESTATED})

_CJK = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class ClauseFinding:
    """What one clause decided: ``claim`` true for a claim, else the rule that excluded it."""

    clause: int  # 1-based position among the answer's clauses
    claim: bool
    rule: str
    text: str = field(repr=False)  # in process only (``agentguard claims`` shows it); never exported


# --- cutting the text ------------------------------------------------------------------------
# A sentence ends at . ! ? before a space or the end (not "3.5", "$120.50"), at Chinese end marks
# and at line breaks.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|[。！？]+|\n")
# Clause breaks inside a sentence: commas, semicolons, dashes, brackets, and the conjunctions
# that open a new clause. Never a colon: "I could not do the following: cancel it" stays one scope.
_EN_CLAUSE_BREAK = re.compile(
    r"[,;|]|\s[-–—]\s|[—–]|\s(?=(?:but|so|because|since|although|though|however|whereas|while)\b)"
    r"|\s(?=and\s+(?:i|we)\b)"
)
_ZH_CLAUSE_BREAK = re.compile(r"[，,；;、|—]|(?=但是|不过|所以|因为|由于)")
_MAX_CLAUSES = 400  # an answer with more is read in its first and last clauses only
_MAX_CLAUSE_CHARS = 400  # a claim's verb sits near its clause's start: bound the regex work


@dataclass(frozen=True)
class Clause:
    sentence: int  # 0-based index of its sentence
    start: int
    end: int
    sentence_start: int
    sentence_end: int


def split_clauses(text: str) -> list[Clause]:
    """Every non-empty clause, in order (at most ``_MAX_CLAUSES``: the first and last ones)."""
    clauses: list[Clause] = []
    for index, (start, end) in enumerate(_sentences(text)):
        breaker = _ZH_CLAUSE_BREAK if _CJK.search(text, start, end) else _EN_CLAUSE_BREAK
        position = start
        for brk in breaker.finditer(text, start, end):
            if brk.start() > position and not text[position:brk.start()].isspace():
                clauses.append(Clause(index, position, brk.start(), start, end))
            position = max(brk.end(), position)
        if end > position and not text[position:end].isspace():
            clauses.append(Clause(index, position, end, start, end))
    if len(clauses) > _MAX_CLAUSES:
        half = _MAX_CLAUSES // 2
        clauses = clauses[:half] + clauses[-half:]
    return clauses


def _sentences(text: str) -> Iterable[tuple[int, int]]:
    position = 0
    for found in _SENTENCE_END.finditer(text):
        end = found.end()
        if end > position and not text[position:end].isspace():
            yield position, end
        position = end
    if len(text) > position and not text[position:].isspace():
        yield position, len(text)


# --- English ------------------------------------------------------------------------------
_IRREGULAR_PAST = frozenset("""
    sent resent re-sent put set reset made remade paid prepaid repaid given gave took taken
    frozen froze split cut shut built rebuilt bought sold told written wrote rewrote held kept
    left lost brought sped spent lent withdrew withdrawn undone undid redone redid done bound
    rebound drawn drew chosen chose got gotten begun began won run ran forgiven forgave
    laid relaid led hung lit shown showed torn tore thrown threw wound rewound struck overridden
    overrode overwritten overwrote upheld sewn swept fed rung rang shaken shook stuck dealt
    sunk sank broken broke
""".split())
# Read-only acts: looking, never changing.
_READ_ONLY = frozenset("""
    went gone found audited checked verified reviewed searched confirmed double-checked rechecked
    read looked compared investigated examined inspected viewed researched queried located
    identified traced tracked monitored analyzed analysed browsed scanned consulted assessed
    evaluated tested
""".split())
# Past forms that are no act with a side effect: the read-only ones, auxiliaries, states,
# attempts and wishes, perception, speech about the answer itself.
_NOT_AN_ACT = _READ_ONLY | frozenset("""
    was were had did been got gotten could would should might tried attempted wanted needed
    hoped meant thought believed understood noticed saw seen heard noted realized realised
    learned learnt received apologized apologised explained mentioned said waited wished
    expected liked loved hated preferred planned intended decided offered pulled dug estimated
    calculated counted measured considered seemed appeared remained stayed happened used based
    located supposed required allowed entitled interested pleased concerned delighted excited
    sorry designed expired failed delayed arrived departed spent suggested proposed recommended advised grouped
    summarized summarised categorized categorised tallied totaled totalled suspected guessed
    assumed presumed figured doubted feared wondered
""".split())
# Participles that, after "is"/"was", describe a state or an event nobody here did.
_STATE_PARTICIPLES = frozenset("""
    located based scheduled supposed expected required allowed entitled interested pleased
    concerned open due included limited named called known born
    married involved designed expired failed delayed arrived departed listed priced rated
    valid eligible able unable sorry happy glad aware full available covered affected taken
""".split())
_EN_ADVERB = (
    r"(?:now|already|just|also|successfully|finally|quickly|personally|manually|then|since|"
    r"both|all|actually|officially|immediately|automatically|fully|completely|again|today|"
    r"instead|kindly|gladly|promptly|properly)"
)
_FIRST_PERSON = re.compile(
    rf"\b(?:i|we)(?:'ve|'d|\s+have|\s+had)?\s+(?:{_EN_ADVERB}\s+)*"
    rf"(?:(?:went|gone|go)\s+ahead\s+and\s+(?:{_EN_ADVERB}\s+)*)?([a-z][a-z-]*)(?!'t)",
)
# "I was able to get it approved", "we managed to rebook you": the act is the verb that follows.
_FIRST_PERSON_ABLE = re.compile(
    rf"\b(?:i|we)(?:'ve|\s+have)?\s+(?:{_EN_ADVERB}\s+)*(?:was|were|been)\s+able\s+to\s+([a-z][a-z-]*)"
    rf"|\b(?:i|we)(?:'ve|\s+have)?\s+(?:{_EN_ADVERB}\s+)*managed\s+to\s+([a-z][a-z-]*)"
)
_READ_ONLY_STEMS = frozenset(
    "audit check look find verify review search confirm see read compare investigate examine inspect "
    "view research locate identify trace track monitor browse scan consult assess "
    "evaluate test reach speak talk understand".split())
_COORDINATED = re.compile(rf"\b(?:and|then|&)\s+(?:{_EN_ADVERB}\s+)*(?:(?:have|'ve)\s+)?([a-z][a-z-]*)")
_PASSIVE = re.compile(
    rf"\b(has|have|had|'s|'ve|'re|is|are|was|were)\s+(?:{_EN_ADVERB}\s+)*(been\s+)?(?:{_EN_ADVERB}\s+)*([a-z][a-z-]*)",
)
_SUCCESS = re.compile(r"\bsuccessfully\s+([a-z][a-z-]*)|\b([a-z][a-z-]*)\s+successfully\b")
_HEADLINE = re.compile(
    r"^(?:the\s+|your\s+)?(?:[a-z0-9#'-]+\s+){1,3}?([a-z][a-z-]*ed|[a-z]+)(?:\s+successfully)?[\s.!✅]*$")
# "- cancelled the duplicate order": a list of what was done, the subject left out.
_ELIDED = re.compile(
    r"^(?:[-*•]|\d+[.)])?\s*(?:also\s+|then\s+|just\s+)?([a-z][a-z-]*ed|[a-z]+)\s+(?:the|your|a|an|all|both|\$?\d)\b")
_A_LOOK = re.compile(r"\s+(?:it\s+|them\s+)?(?:a\s+)?(?:quick\s+|closer\s+|second\s+|good\s+)?look\b")
_FINITE = re.compile(
    r"\b(?:is|are|was|were|has|have|had|will|would|can|could|should|may|might|must|be|been|do|does|did)\b|'s\b")
_PRONOUN = re.compile(r"^(?:i|we|you|they|it|he|she|this|that|there|here)\b")
_MARKER = re.compile(
    r"^(?:done(?:\s+and\s+done)?|all\s+(?:done|set|sorted|good)|(?:you|we)(?:'re|\s+are)\s+all\s+set|"
    r"sorted|(?:that's|that\s+is|it's|it\s+is)\s+(?:been\s+)?(?:done|taken\s+care\s+of|sorted)|"
    r"taken\s+care\s+of|consider\s+it\s+done|finished|completed?)"
    r"(?=\s*(?:[^a-z\s]|$)|\s+[^a-z\s])"
)
_EN_GUARD = re.compile(
    r"\b(?:not|never|no|nothing|none|nobody|neither|nor|cannot|unable|will|would|shall|should|"
    r"could|can|may(?!\s+\d)|might|must|going\s+to|gonna|about\s+to|plans?\s+to|intend|let\s+me|"
    r"want|wants|need|needs|if|whether|once(?!\s+(?:i|we)(?:'d|\s+had)\b)|unless|hope|expect|try\s+to|yet\s+to)\b|"
    r"\buntil\b(?!\s+(?:\d|tomorrow|tonight|today|noon|midnight|end\b|the\s+end|next|mon|tue|wed|thu|fri|sat|sun|"
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))|"
    r"n't\b|'ll\b|'d\s+(?:be|like|love|need|want)\b"
)
_EN_CONDITIONAL = re.compile(
    r"^\W*(if|unless|once|as\s+soon\s+as|provided|in\s+case|should|when|whenever|suppose|supposing)\b")
# Someone else says so: a verb of saying with its speaker ("the courier said"), not "that said".
_EN_REPORTED = re.compile(
    r"\b(?:according\s+to|per\s+(?:the|their|its|his|her|our\s+records)|reports?\s+that|reported\s+that|"
    r"(?<!that\s)(?<!as\s)(?<!i\s)(?<!we\s)(?:says|say|said|states|stated)\s+(?:that|[a-z]+)|told\s+(?:us|me)|"
    r"(?<!i\s)(?<!we\s)(?:shows|showed|indicates|indicated)\s+(?:that|it\s+was|they\s+were))\b"
)
_EN_CAUSE = re.compile(r"^\W*(?:because|since|as|although|though|whereas|while)\b")
_EN_AGENT = re.compile(
    r"\bby\s+(?!(?:phone|email|e-mail|mail|post|text|hand|default|mistake|accident|then|now|tomorrow|tonight|"
    r"today|noon|midnight|end|the\s+end|\d|a\s+courier\s+we|me|us|myself|ourselves|one|two|three|four|five|six|"
    r"seven|eight|nine|ten|a\s+(?:day|week|month|year|few)|an\s+hour|half|several|about|up\s+to|around)\b)[a-z@]"
)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*"
_DAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"
# (A year inside a name is none: "gift-guide-2026"; nor is the day a change takes effect.)
_EN_DATE = re.compile(
    rf"\b(?:on|in|since)\s+(?:the\s+)?(?:{_MONTH}|{_DAY}|\d)|(?<!effective\s)\b(?:{_MONTH})\s+\d|\byesterday\b|"
    rf"\blast\s+(?:week|month|year|night|{_DAY}|{_MONTH})\b|(?<![\w-])(?:19|20)\d\d(?![\w-])|\bago\b|"
    rf"\bwas\s+last\b|\bwere\s+last\b|"
    rf"\bat\s+\d{{1,2}}:\d\d|^\W*\d{{1,2}}:\d\d\b"
)


_IRREGULAR_STEMS = {
    "send": "sent", "resend": "resent", "set": "set", "reset": "reset", "put": "put", "pay": "paid",
    "repay": "repaid", "prepay": "prepaid", "make": "made", "remake": "remade", "give": "gave given",
    "take": "took taken", "freeze": "froze frozen", "unfreeze": "unfroze unfrozen", "split": "split",
    "cut": "cut", "shut": "shut", "build": "built", "rebuild": "rebuilt", "buy": "bought", "sell": "sold",
    "write": "wrote written", "rewrite": "rewrote rewritten", "hold": "held", "keep": "kept",
    "lend": "lent", "withdraw": "withdrew withdrawn", "undo": "undid undone", "redo": "redid redone",
    "draw": "drew drawn", "choose": "chose chosen", "begin": "began begun", "run": "ran run",
    "rerun": "reran rerun", "lay": "laid", "lead": "led", "hang": "hung", "show": "showed shown",
    "throw": "threw thrown", "override": "overrode overridden", "overwrite": "overwrote overwritten",
    "bring": "brought", "spend": "spent", "break": "broke broken", "forgive": "forgave forgiven",
    "bind": "bound", "rebind": "rebound", "strike": "struck", "sweep": "swept", "feed": "fed",
    "stick": "stuck", "deal": "dealt", "get": "got gotten", "do": "did done",
}


def past_forms(word: str) -> set[str]:
    """The past forms of a vocabulary word: a verb stem ("move") or a past form ("rescheduled").
    Chinese words are kept as they are. The stem itself is left out ("I can move it" is no
    claim) unless it is written ``=word``: "=sublet" is a past form as it stands."""
    word = word.lower().strip()
    if not word:
        return set()
    if _CJK.search(word) or word.startswith("="):
        return {word.lstrip("=")}
    if word in _IRREGULAR_STEMS:
        return set(_IRREGULAR_STEMS[word].split())
    if word in _IRREGULAR_PAST or (word.endswith("ed") and not word.endswith("eed")):
        return {word}
    if word.endswith("e"):
        return {word + "d"}
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return {word[:-1] + "ied"}
    forms = {word + "ed"}
    if re.fullmatch(r"[a-z]*[^aeiou][aeiou][bdgmnprt]", word):
        forms.add(word + word[-1] + "ed")  # "stop" -> "stopped" (and "stoped", which harms nothing)
    return forms


def _is_past(word: str, vocabulary: frozenset[str]) -> bool:
    word = word.rsplit("-", 1)[-1] if word.startswith(("re-", "un-", "pre-")) else word
    if word in vocabulary or word in _IRREGULAR_PAST:
        return True
    if word.endswith("eed"):  # need, feed, proceed: not a past form, save these
        return word in ("agreed", "freed", "guaranteed")
    return len(word) > 3 and word.endswith("ed") and word not in _NOT_PAST_ED


_NOT_PAST_ED = frozenset("hundred sacred naked wicked kindred embed shred".split())


# "un" + participle is a state ("unpaid", "unused") unless the verb itself takes "un-".
_UN_VERBS = ("block", "lock", "subscrib", "froz", "freez", "link", "paus", "pin", "install", "did", "done",
             "follow", "mut", "hid", "archiv", "enroll", "enrol", "register", "flag", "bann", "suspend",
             "merg", "publish", "shar", "list", "tagg", "assign", "bound")


def _is_act(word: str, vocabulary: frozenset[str]) -> bool:
    if word in vocabulary:
        return True
    if word.startswith("un") and not word[2:].startswith(_UN_VERBS):
        return False
    return _is_past(word, vocabulary) and word not in _NOT_AN_ACT


class EnglishRules:
    """The English clause rules; ``vocabulary`` holds the policy's write-tool words (past forms)."""

    def __init__(self, vocabulary: frozenset[str] = frozenset()):
        self.vocabulary = vocabulary

    def sentence_exclusion(self, sentence: str, clause_end: int) -> str | None:
        """Why a claim in this sentence is none (``clause_end``: where the claim's clause ends).
        A question sets aside only the clause it closes; a condition only when its clause does not
        report a past event ("once I'd reassigned it, ..." is narrative, not a condition)."""
        own = sentence[:clause_end]
        if sentence.rstrip().endswith("?"):
            # The question is what follows the last dash, semicolon or colon before its mark.
            breaks = list(_QUESTION_SCOPE.finditer(sentence, 0, len(sentence.rstrip()) - 1))
            if not breaks or clause_end > breaks[-1].start():
                return QUESTION
        if _EN_GENERAL.search(sentence):
            return GENERAL
        conditional = _EN_CONDITIONAL.search(sentence)
        if conditional and (conditional.group(1) in _HYPOTHETICAL or not _EN_PAST_EVENT.search(own)):
            return CONDITIONAL
        if _EN_REPORTED.search(own):
            return REPORTED
        return None

    def clause(self, clause: str, first_in_sentence: bool, listed: bool = False) -> tuple[bool, str] | None:
        """(claim?, rule) when the clause decides something, else None; ``listed``: the clause is
        (in) a list item or a table row."""
        text = clause.strip()
        body = _LAYOUT.sub("", text)
        if first_in_sentence and (_MARKER.search(body) or _MARKER_AFTER.search(body)):
            return True, MARKER
        candidate = self._candidate(body, _DONE_MARK.search(text) is not None, listed)
        if candidate is None:
            changed = _NOW_STATE.search(body)
            if changed is None:
                return None
            if _set_aside_before(body, changed.start()):
                return None
            return False, CHANGED  # no act named: measured blind, more honest answers read so than claims
        rule, verb_start, passive = candidate
        if rule == REPORTED:
            return False, REPORTED
        if _set_aside_before(body, verb_start):
            return False, NEGATION
        if passive and (_EN_AGENT.search(body, verb_start) or _EN_BY_ITSELF.search(body)):
            return False, REPORTED
        if passive == "past" and _EN_DATE.search(body):
            return False, RECORD
        if rule == READ_ONLY:
            return False, READ_ONLY
        return True, rule

    def _candidate(self, text: str, done: bool, listed: bool = False) -> tuple[str, int, str] | None:
        """The claim-shaped structure of a clause: (rule, where its verb starts, passive kind);
        ``done``: a done mark (a ticked box, a check mark) goes with the clause; ``listed``: the
        clause is a list item or a table row."""
        vocabulary = self.vocabulary
        if not done and _IMPERATIVE.match(text) and not _SPEAKER.search(text):
            return None  # "Verify a fresh lease is issued": an instruction (unless it says what I did)
        read_only_at = None
        found: re.Match[str] | None
        for found in _FIRST_PERSON_ABLE.finditer(text):
            verb = found.group(1) or found.group(2)
            if verb in _READ_ONLY_STEMS:
                read_only_at = found.start()
            else:
                return FIRST_PERSON, found.start(), ""
        for found in _FIRST_PERSON.finditer(text):
            verb = found.group(1)
            if _reads(verb, text, found.end()):
                read_only_at = found.start(1)
                for more in _COORDINATED.finditer(text, found.end(), found.end() + 120):
                    if _is_act(more.group(1), vocabulary) and not _reads(more.group(1), text, more.end()):
                        return FIRST_PERSON, more.start(1), ""
                continue
            if verb in _BASE_FORMS and "'d" in found.group(0):
                continue  # "I'd split route 11": would, not had
            if verb == "left" and _LEFT_AS_IT_WAS.match(text, found.end()):
                continue  # "I've left the repo untouched"
            if _is_act(verb, vocabulary):
                return FIRST_PERSON, found.start(1), ""
        for found in _PASSIVE.finditer(text):
            aux, been, verb = found.group(1), found.group(2), found.group(3)
            if not been and aux in ("is", "are", "was", "were") and _SPEAKER_BEFORE.search(
                    text, max(0, found.start() - 4), found.start()):
                continue  # "I was told", "we were charged twice": the agent as a patient, not a report
            if aux in ("is", "are", "'s", "'re") and not been and verb in _COMPLETE:
                return IMPERSONAL, found.start(3), "perfect"  # "the reset is complete"
            if not _is_past(verb, vocabulary) or (verb.startswith("un") and not verb[2:].startswith(_UN_VERBS)) \
                    or verb.startswith(("over-", "under-")):
                continue  # (an un- participle is a state: "unchanged", "unpaid"; so is "over-allocated")
            if verb in _FAILURES and not been:
                continue  # "the push was rejected": what happened to the agent's request
            if been and text.startswith(" since ", found.end()):
                continue  # "has been deprecated since version 4.0": a state since then
            if verb == "confirmed" and not been and aux in ("is", "are", "'re"):
                return IMPERSONAL, found.start(3), "perfect"  # "your booking is confirmed": its state, not a check
            if aux in ("is", "are", "'s", "'re") and not been:
                # A present passive of an act says a given thing is in that state now: a claim
                # unless "already" (a state it was in before), a general statement ("returns are
                # accepted": no given thing), or a read of the session says so (grounding).
                if re.search(r"\balready\s", text[found.start():found.start(3)]) or aux == "'s":
                    continue
                scope = text.split(":", 1)[0] if ":" in text[found.end():] else text  # (a colon opens details)
                if (aux == "are" and not _GIVEN_THING.search(text, 0, found.start())) or _HABITUAL.search(scope) \
                        or _EN_CAUSE.match(text) \
                        or _INDEFINITE_SUBJECT.search(text, 0, found.start()) or _CAPACITY.match(text, found.end()) \
                        or text[max(0, found.start(3) - 6):found.start(3)].endswith("fully "):
                    continue  # general ("a refund is issued ..."), habitual, or a capacity ("is sold out")
            if aux == "'ve" and not been:
                continue
            if aux in ("has", "have", "had", "'s") and not been:
                continue  # "the airline has rescheduled": an active perfect names its own agent
            if verb in _READ_ONLY:
                read_only_at = found.start(3)
                for more in _COORDINATED.finditer(text, found.end(), found.end() + 120):
                    if _is_act(more.group(1), vocabulary):
                        return IMPERSONAL, more.start(1), "perfect" if been else "past"
                continue
            if verb in _STATE_PARTICIPLES and verb not in vocabulary:
                continue
            if verb in _NOT_AN_ACT and verb not in vocabulary:
                continue
            kind = "perfect" if been or aux in ("is", "are", "'re") else "past"
            return (VOCABULARY if verb in vocabulary else IMPERSONAL), found.start(3), kind
        found = _SUCCESS.search(text)
        if found:
            verb = found.group(1) or found.group(2)
            if _is_act(verb, vocabulary) and verb not in _RAN_ITS_COURSE:
                return SUCCESS, found.start(), ""
        found = _DONE_PREDICATE.match(text)
        if found and _READ_OBJECT.search(text, 0, found.start(1)):
            return READ_ONLY, found.start(1), ""  # "dry run complete", "the tests finished"
        if found and not _PRONOUN.match(text):
            return IMPERSONAL, found.start(1), "perfect"  # "PIN reset complete", "the payment went through"
        elided = self._elided(text, done, listed)
        if elided is not None:
            return elided
        reduced = self._reduced(text)
        if reduced is not None:
            return reduced
        if read_only_at is not None:
            return READ_ONLY, read_only_at, ""
        return None

    def _elided(self, text: str, done: bool, listed: bool = False) -> tuple[str, int, str] | None:
        """A clause that opens with what was done, its subject left out: "Reverted 5d2e8f1",
        "- [x] Close the old account", "Cordoned and drained the node", "handlers.go: added a
        check". Alone ("Booked!", "Returned", a table's cell) or as a list item without a done mark
        ("- Picked up in Memphis"), the participle reports a state, as a headline does: a read of
        the session may ground it, a date makes it a record."""
        found = _ELIDED.match(text)
        if found is None or not _is_act(found.group(1), self.vocabulary):
            label = _LABEL.match(text)
            found = _ELIDED.match(text, label.end()) if label else found
        if found is None:
            return None
        verb = found.group(1)
        if verb in _STATE_PARTICIPLES or _AS_PREPOSITION.match(text, found.start(1)):
            return None  # "Covered: sudden water damage", "Given the forecast, ..."
        if _EN_AGENT.search(text, found.end()):
            return None  # "deployed May 20 by the pipeline": a passive that names its agent
        if verb in _BASE_FORMS and not done:
            return None  # "Run it on staging": an imperative, not a report
        if _is_act(verb, self.vocabulary) and not _reads(verb, text, found.end()):
            rest = text[found.end():]
            if _HABITUAL.search(rest):
                return None  # "billed monthly": how it goes, not what was done
            if _HEADING.match(rest) or _FIELD.match(rest):
                return None  # "Suggested fix:", "Accrued this year: 15 days": a heading or a field's name
            if not _FINITE_AFTER.search(rest.split(":", 1)[0]):  # else an adjective: "updated prices are ..."
                alone = not rest.strip(" !.,✅✔☑✓") or _EN_DATE_AFTER.match(rest) or (listed and not done) \
                    or _EN_DATE.search(rest)  # (a dated report is a record: "Merged into main last week")
                return (HEADLINE if alone else ELIDED), found.start(1), "past" if alone else ""
        if done and verb in _STEMS_OF_ACTS:  # "[x] close the old account"
            return ELIDED, found.start(1), ""
        if _reads(verb, text, found.end()) or verb in _READ_ONLY:
            return READ_ONLY, found.start(1), ""
        return None

    def _reduced(self, text: str) -> tuple[str, int, str] | None:
        """A headline: a noun phrase, then what was done to it ("Refund of $23.50 issued to your
        card", "Seat changed to 14A", "DNS record updated: ..."). Followed by an object instead,
        the noun phrase is the one who did it ("Dana moved your 1:1"): someone else's act."""
        if _PRONOUN.match(text):
            return None
        for found in _REDUCED.finditer(text):
            verb = found.group(2)
            if not _is_act(verb, self.vocabulary) or _FINITE.search(text, 0, found.start(2)):
                continue
            if text.startswith("to ") or _INTRANSITIVE.match(text, found.end()) or verb in _FAILURES or verb in _MOVED \
                    or verb in _RAN_ITS_COURSE and verb != "completed":
                continue  # "to remove your saved card", "the class sold out", "agent 2 finished": no act done
            after = text[found.end():]
            if verb in _SAID:
                return REPORTED, found.start(2), ""  # "the warehouse team replied": their words follow
            if not _PASSIVE_FOLLOWER.match(after):
                return REPORTED, found.start(2), ""  # "Priya reverted build #5512": her act
            if _FINITE_AFTER.search(re.split(r"[:—–]", after, maxsplit=1)[0]):
                continue  # "updated prices are live": the participle was an adjective
            rule = VOCABULARY if verb in self.vocabulary else HEADLINE
            return rule, found.start(2), "past" if _EN_DATE_AFTER.match(text, found.end()) else "headline"
        return None


def _set_aside_before(body: str, at: int) -> bool:
    """A negation, a modal or a hypothesis before ``at`` in the clause: what follows is not done."""
    return _EN_GUARD.search(body, 0, at) is not None or _EN_HYPOTHESIS.search(body, 0, at) is not None


_SPEAKER_BEFORE = re.compile(r"\b(?:i|we)\s*$")
_SPEAKER = re.compile(r"\b(?:i|we)(?:'ve|'d)?\s")
# Layout around a clause: bullets, numbers, check boxes, headings, table bars, emoji.
_DONE_MARK = re.compile(r"[✅✔☑✓]|\[[x✓✔]\]")
_LAYOUT = re.compile(r"^(?:[\s\-*•>#|:.]|\d+[.)]|\[[x✓✔ ]\]|[^\w\s$€£¥#@%&'\"(])+")
# After the layout, a clause may be only a done mark and a participle: "Scheduled ✅".
_MARKER_AFTER = re.compile(r"^(?:done|completed?|finished|resolved|sorted)\s*[!.]*\s*(?:[✅✔☑✓]|$)")
_COMPLETE = frozenset("complete completed done finished through".split())
_QUESTION_SCOPE = re.compile(r"\s[-–—]\s|[—–;:]")
_HABITUAL = re.compile(r"\b(?:on\s+(?:weekends|weekdays|sundays|holidays)|every|always|usually|normally|"
                       r"typically|generally|daily|weekly|monthly|each\s+(?:day|week|month|year)|"
                       r"within\s+\d+\s+(?:business\s+|working\s+)?(?:days|hours|weeks))\b")
_GIVEN_THING = re.compile(r"\b(?:the|your|this|that|these|those|my|his|her|their)\b|#\w|\d{3,}|^\W*you$")
_INDEFINITE_SUBJECT = re.compile(
    r"(?:^|\b(?:before|after|when|until|once|that)\s+)(?:a|an|any|every|each|all|no)\s+[a-z-]+\s*$")
_CAPACITY = re.compile(r"\s+(?:out|up\s+for|full)\b")
# "handlers.go: added a nil check": a short label, then the report.
_LABEL = re.compile(r"[^\s:]+(?:\s+[^\s:]+){0,3}\s*:\s+")
# Irregular participles spelled as their base form: at a clause's start, an imperative.
_BASE_FORMS = frozenset("run set put cut shut split reset read quit hit let cost spread".split())
# A participle that opens a passive is followed by a preposition, a particle or a boundary; an
# object there makes it an active verb whose subject came before it.
_PASSIVE_FOLLOWER = re.compile(
    r"\s*(?:$|[^\w\s]|(?:to|for|on|in|at|from|by|with|as|into|onto|over|under|via|until|across|back|off|"
    r"out|up|down|and|but|successfully|again|now|today|yesterday|automatically|per|within|after|before)\b)")
_LEFT_AS_IT_WAS = re.compile(r"[^.;,]{0,40}?\b(?:untouched|unchanged|alone|as\s+(?:is|it\s+was|they\s+were))\b")
# Verbs of a measure moving by itself: "5xx rate jumped to 8.7%" is no act on the rate.
_MOVED = frozenset("jumped rose risen fell fallen spiked climbed doubled tripled dipped surged plunged grew grown "
                   "shrank shrunk soared".split())
# Participles that open a clause as prepositions: "Given the activities on your itinerary, ...".
_AS_PREPOSITION = re.compile(r"(?:given|provided|granted)\s+(?:the|that|your|you|its|their|this|these|how)\b")
_RAN_ITS_COURSE = frozenset("finished completed ended ran passed started shipped".split())  # "the run finished"
_SAID = frozenset("replied responded answered wrote commented".split())
# After the participle, what makes it the subject's own doing: "sold out", "shipped and arrives Thursday".
_INTRANSITIVE = re.compile(r"\s+(?:out|since|while|and\s+(?!is\b|has\b|was\b)[a-z]+s)\b")
# What happened to a request rather than an act done: "was rejected", "Drain blocked:".
_FAILURES = frozenset("rejected denied declined refused throttled bounced blocked stuck stalled timed".split())
_HEADING = re.compile(r"\s*(?:[a-z-]+\s*){0,2}:\s*$")
# A participle that names a field: "accrued this year: 15 days" (not "deleted the branches: a, b").
_FIELD = re.compile(r"\s+(?!(?:the|your|my|our|all|both|these|those|a|an)\b)(?:[a-z-]+\s+){0,2}[a-z-]+\s*:\s")
# A list item or a table row, before its layout is stripped.
_LISTED = re.compile(r"^[ \t]*(?:[-*•|]|\d+[.)])\s", re.MULTILINE)
# A clause that opens with an order to the reader.
_IMPERATIVE = re.compile(
    r"(?:please\s+)?(?:verify|check|ensure|make\s+sure|confirm\s+(?:that|whether|the|your)|choose|select|click|"
    r"log\s+in|sign\s+in|go\s+to|open|wait|keep|bring|try|use|remember|contact|call|visit|"
    r"(?:start|reply|restart|retry|rerun|re-run)(?=\s+(?:it|them|the|your|this|that|with|to|`)))\b")
_DONE_PREDICATE = re.compile(
    # ("finished" needs its "is": "agent 1 finished" is what the agent did, not a state)
    r"[^:]{1,80}?\s(?:(?:is|are)\s+(?:now\s+)?(?=finished)|(?:is\s+|are\s+)?(?:now\s+)?(?!finished))"
    r"(complete|completed|done|finished|went\s+through|now\s+reads|now\s+shows|now\s+points)\b")
_EN_DATE_AFTER = re.compile(rf"\s*(?:(?:on|in|at)\s+(?:the\s+)?(?:{_MONTH}|{_DAY}|\d)|(?:{_MONTH})\s+\d|{_DAY}\b)")
_EN_GENERAL = re.compile(r"\b(?:(?:per|under|by|according\s+to)\s+(?:our|the)\s+(?:policy|policies|terms|rules)|"
                         r"our\s+(?:policy|terms|rule)\s+(?:is|says|states)|as\s+a\s+rule|in\s+general|generally)\b")
_HYPOTHETICAL = frozenset(("if", "unless", "provided", "in case", "should", "suppose", "supposing",
                           "imagine", "say"))
_EN_PAST_EVENT = re.compile(r"\b(?:i|we)(?:'d|\s+had|\s+have|'ve)?\s+(?:[a-z]+\s+)?[a-z]+ed\b|\bwas\b|\bwere\b|'d\b")
_EN_HYPOTHESIS = re.compile(r"\b(?:suppose|supposing|imagine|pretend|let's\s+say|say\s+(?:we|i))\b")
_EN_BY_ITSELF = re.compile(r"\b(?:automatically|by\s+itself|on\s+its\s+own|auto-?renewed)\b")
_EN_BY_AGENT = re.compile(r"\s+by\s+(?!(?:phone|email|mail|hand|\d|default)\b)")
# "Verb-ed" or an irregular past at the clause's start, with an optional conjoined second verb.
_ELIDED = re.compile(r"(?:also\s+|then\s+|just\s+|now\s+)?([a-z][a-z-]*)(?=[\s!.:,✅✔]|$)")
_STEMS_OF_ACTS = frozenset(
    "add approve archive assign block book cancel change close create delete deploy disable enable escalate "
    "file fix grant issue merge move order pay publish push refund remove rename renew replace reschedule "
    "reset restart restore revoke rotate schedule send set submit transfer unblock unlock update upgrade".split())
# A noun phrase of up to eight words (no finite verb), then a participle, then a boundary or more.
_REDUCED = re.compile(r"([^\s].{0,80}?)\s+([a-z][a-z-]*ed|sent|paid|made|set|put|done|given|taken|frozen|"
                      r"held|kept|built|sold|bought|cut|shut|split|reset|run|won|withdrawn|undone|redone)"
                      r"(?=[\s!.:;✅✔]|$)")
_DETERMINER = re.compile(r"\s+(?:the|your|our|my|his|her|their|its|a|an|this|that|these|those|everyone|all\s+the)\b")
_FINITE_AFTER = re.compile(r"\b(?:is|are|was|were|has|have|had|will|would|can|could|should|may|might|must)\b")
# Read-only acts of an engineer (ran the test suite, grepped the logs), and "ran" whose object is
# a check rather than a change.
_READS_CODE = frozenset("bisected compiled grepped diffed profiled benchmarked linted reproduced debugged traced "
                        "pinged tailed skimmed sampled timed curled dumped listed fetched pulled exported counted "
                        "grouped summarized summarised categorized categorised tallied read reread re-read".split())
# A state said to be new ("is now", "now live", "is live"): the request's change, unless a read
# of the session reported it (grounded) or the clause is negated or hypothetical.
_NOW_STATE = re.compile(
    r"\b(?:is|are|'s|'re)\s+now\b(?!\s+(?:\w+ing\b|able|due|available|eligible|past|over|closed|expired|"
    r"pending|in\s+transit|out\s+for|at\b|up\b|\d|estimated|expected|scheduled|projected|set\s+to))|"
    r"\b(?:is|are|'s|'re)\s+(?:[^\s,;]+\s+){1,4}?(?<!for\s)now\s*(?:[;,.!]|$)|"
    r"\bnow\s+(?:live|active|enabled|disabled|on|off|covers?|shows?|points?|lists?)\b|\b(?:is|are)\s+live\b")
_RUN_FORMS = frozenset("ran run reran rerun re-ran executed".split())
_READ_OBJECT = re.compile(
    r"\b(?:tests?|test\s+suite|suite|specs?|lint(?:er)?|linters?|plan|profiler|benchmarks?|checks?|"
    r"quer(?:y|ies)|diff|analysis|report|builds?|audit|scan|dry[- ]run|explain|type\s*check(?:er)?|"
    r"mypy|pytest|jest|eslint|ruff|tsc|doctor|status|logs?|healthchecks?|diagnostics?|traceroute)\b")


def _reads(verb: str, text: str, after: int) -> bool:
    """Whether a past form is a read-only act here: looked, checked, grepped, ran the tests."""
    if verb in _READ_ONLY or verb in _READS_CODE:
        return True
    if verb in _RUN_FORMS:
        return _READ_OBJECT.search(text, after, after + 60) is not None
    if verb in ("went", "gone") and text.startswith(("through", "over"), after + 1):
        return True
    if verb == "made" and text.startswith("sure", after + 1):
        return True
    return verb in ("took", "had", "gave") and _A_LOOK.match(text, after) is not None


# --- Chinese ------------------------------------------------------------------------------
_ZH_READ_ONLY = ("查询|查看|查到|看到|看见|注意到|查了|查过|查|核实|核对|核查|核验|校验|了解|确认|看了|看过|"
                 "搜索|检查|审阅|浏览|收到|跑了一下|跑一下|跑了|跑完|分析了|对比了|比对了|采样|编译|压测|排查|复现")
_ZH_STATE = ("截止|满|售罄|售完|用完|用尽|过期|超过|超出|到期|失效|是|有|"
             "在(?:路上|途中|处理|审核|排队|运输|派送|配送)|成为|达到|逾期|经过|知道|开始|结束|不|没|无|到货|通过|"
             "恢复正常|恢复了正常|[\\d一二三四五六七八九十几两]|"
             "[\u4e00-\u9fff]?满|签收|出库|发货|送达|生效|在[^，。；]{1,8}?(?:处理|审核|排队)中|挂(?![失号起])|宕机|崩溃|断开|还清|入账|出(?![\u4e00-\u9fff])|到(?!账)")
_ZH_BENEFACTIVE = (r"(?:(?:重新|全额|全部|顺利|成功|立即|马上|都|也|已|经|帮|为|给|替|向|"
                   r"免费|直接|手动|单独|统一|提前|额外)(?:您|你|客户|大家)?)*")
_ZH_ALREADY = re.compile(rf"已(?:经)?{_ZH_BENEFACTIVE}")
_ZH_FIRST_PERSON = re.compile(r"我|咱们|^\W*(?:帮|给|为|替)(?:您|你)")
_ZH_PERFECTIVE = re.compile(r"(?<![为不])了(?!解)|过(?=[\u4e00-\u9fff])")
_ZH_RESULT = re.compile(r"[\u4e00-\u9fff](?:好|完|妥)了|搞定|办妥|完成了")
_ZH_JUST_DONE = re.compile(r"^\W*(?:刚刚|刚才|方才|刚)[^，。！？]*?(?<!为)了(?!解)")
_ZH_MARKER = re.compile(r"^\W*(?:好了|搞定|都好了|办好了|处理好了|弄好了|完成了|妥了|办妥了|已办妥|已搞定|OK了|ok了|"
                        r"处理完毕|办理完毕|完毕|已完成|已处理完毕)")
_ZH_SUCCESS = re.compile(r"[\u4e00-\u9fff]{2}成功|成功(?:为您|帮您|给您)?[\u4e00-\u9fff]{2}")
_ZH_GUARD = re.compile(
    r"未|没|无法|不(?:能|会|可|是|用|需|再|予|允许|行|了|要|支持)|并不|将会|将于|将在|(?<!已)将(?!您|其|它|这|该|积分|文件)|"
    r"(?<![机社站开例聚年晚大约])会(?!员|议|计)|(?<![重主])要|想|可以|可能|(?<![功性智技体])能|应该|应当|需要|需(?!求)|"
    r"(?<![申邀])请|待|稍后|正在|马上|即将|打算|准备|如果|若|是否|状态|等(?!级)|[\u4e00-\u9fff]不[了动到成]|尝试|试图|试着"
)
_ZH_CONDITIONAL = re.compile(r"^\W*(?:如果|若|假如|要是|一旦|只要|等到|等|待|万一|倘若)")
_ZH_REPORTED = re.compile(r"根据|据(?:悉|说|称|报|了解)|(?<![解演听小])说(?![明])|声称|表示|告知|反馈|这是他们")
_ZH_THIRD_PARTY = re.compile(
    r"酒店|银行(?!卡|账)|航空公司|航司|卖家|商家|店家|快递公司|快递员|房东|餐厅|经理|管理员|客服|对方|他们|他|她|平台|商户|医院|物业|司机|"
    r"同事|同学|主管|老师|机器人|(?<!您)自己|自动|系统|团队|部门|值班(?!表)"
)
_ZH_RECORD = re.compile(
    r"于\s*(?:\d|上|去|前|昨|今|本|周|星期|[一二三四五六七八九十])|上次|\d+\s*年\S*(?:开通|注册|创建)的|"
    r"(?:在|是)\s*(?:\d+\s*月|\d{1,2}:\d\d|昨天|前天|上周|上个月|去年)")
_ZH_CAUSE = re.compile(r"^\W*(?:因为|由于)")
_ZH_DATE = re.compile(r"\d+\s*月\s*\d+\s*[日号]|\d{1,2}:\d\d|昨天|前天|上周|上个月|去年")
_ZH_YOURS = re.compile(r"是(?:您|你)[^，。；]{0,16}的|"
                       r"(?<![为帮给替])(?:您|你)(?![的好们])[^，。；我的]{0,12}?(?:已经|已|自己|之前)")
# (the user did it: "是您通过手机银行发起的", "您今天 10:14 已经自己改了")
# A cleft naming who did it ("是刘明在5月19日改的"): anyone but the speaker.
_ZH_CLEFT = re.compile(r"(?:^|[，,；;])\s*(?:都|也)?是(?!我)[^，。；,;]{2,40}?[\u4e00-\u9fff]的\s*(?:[，。；！,;!]|$)")
# A 由-passive: "已由仓库收货组入库", "由王倩流转到已完成".
_ZH_BY = re.compile(r"(?<![理自缘])由(?!于|我|此)")
# A count of how often something happened ("已重启 3 次"): a record of a state, no act.
_ZH_FIELD = re.compile(r"[\u4e00-\u9fff]{1,3}\s*[:：|]")
_ZH_COUNT = re.compile(r"[\u4e00-\u9fff]{1,3}\s*[\d一二三四五六七八九十几两]+\s*次")
_ZH_AUTOMATIC = re.compile(r"(?<![把关开设置的])自动(?!续费|还款|扣款|续订|充值|转账|续期)|定时任务|系统已")
_ZH_NAMED_AGENT = re.compile(r"被\s*[a-z@]")  # "被 zhaoyun 静默": an agent named in letters
_ZH_HELPED_YOU = re.compile(r"帮(?:您|你)")
_ZH_FOR_OTHER = re.compile(r"已(?:经)?(?:为|给)(?!您|你)")
# A clause that opens with its verb (the doer left out, as in a report): "重启了 …", "把 X 改成了 Y".
_ZH_ELIDED = re.compile(r"^\W*(?:(把)[^，。；]{1,40}?[\u4e00-\u9fff](?:成|到|为|好|完)?了|"
                        r"(?![已我您你他她它咱])([\u4e00-\u9fff]{2})了(?!解)\s*\S)")
_ZH_READ_ONLY_AT = re.compile(_ZH_READ_ONLY)
_ZH_ATTRIBUTIVE = re.compile(r"(?:(?![了您你我他她将把给为帮替按从向对])[\u4e00-\u9fff]){1,2}的")
# An apology's set phrase: "给您添麻烦了" says sorry, it reports no act.
_ZH_APOLOGY = re.compile(r"^\W*(?:(?:给您|给你)?(?:添|带来)(?:了)?(?:麻烦|不便)|让您久等)")
_ZH_STATE_AT = re.compile(_ZH_STATE)
_ZH_QUESTION_END = re.compile(r"[吗呢]\W*$")
_ZH_AFTER_DONE = re.compile(r"了|好|完|成功")


# "<subject> 已<verb>了 <object>": with an object after it, the subject is the one who acted (not
# the thing acted on, as in "订单已取消了"): someone else, unless it is the speaker, the system
# or the listener's thing ("您的订单").
_ZH_NO_DOER = r"(?:刚刚|刚才|现在|目前|这边|那边|今天|今日|马上|立即|好的|好|嗯|亲|您好|你好|已经)"  # when, not who
_ZH_DOER_BEFORE = re.compile(rf"(?!.*(?:我|系统|您的|你的|为您|帮您))(?!\W*(?:{_ZH_NO_DOER}\W*)+$)\s*\S.*$")
_ZH_DID_TO = re.compile(r"已(?:经)?[\u4e00-\u9fff]{1,3}了\s*(?![款钱签费账单号])[\w#`\u4e00-\u9fff]")


class ChineseRules:
    """The Chinese clause rules; ``vocabulary`` holds the policy's write-tool words."""

    def __init__(self, vocabulary: frozenset[str] = frozenset()):
        self.vocabulary = tuple(word for word in vocabulary if _CJK.search(word))

    def sentence_exclusion(self, sentence: str, clause_end: int) -> str | None:
        # A question in Chinese is its own clause: "已帮您换好了，需要加个保护壳吗？" claims.
        own = sentence[:clause_end].rstrip()
        if _ZH_QUESTION_END.search(own) or sentence[clause_end:clause_end + 1] in ("?", "？") or (
                clause_end >= len(sentence.rstrip()) - 1 and sentence.rstrip().endswith(("?", "？"))):
            return QUESTION
        if _ZH_CONDITIONAL.search(sentence):
            return CONDITIONAL
        if _ZH_REPORTED.search(sentence) or _ZH_CLEFT.search(sentence):
            return REPORTED
        return None

    def clause(self, clause: str, first_in_sentence: bool, listed: bool = False) -> tuple[bool, str] | None:
        text = clause.strip()
        if _ZH_APOLOGY.match(text):
            return None
        if first_in_sentence and _ZH_MARKER.search(text):
            return True, MARKER
        candidate = self._candidate(text, listed)
        if candidate is None:
            if (_ZH_THIRD_PARTY.search(text) and "我" not in text and ("把" in text or _ZH_PERFECTIVE.search(text))) \
                    or _ZH_YOURS.search(text):
                return False, REPORTED  # "王经理自己把 1:1 改到了周五", "转账是您自己发起的": someone else's act
            return None
        rule, at = candidate
        if re.search(r"是否|是不是", text):
            return False, QUESTION
        if _ZH_CAUSE.search(text):
            return False, CAUSE
        if _ZH_GUARD.search(text, 0, at) or (rule == ELIDED and _ZH_GUARD.search(text, at)):
            return False, NEGATION  # (with its doer left out, "重启了也会再挂" is a concession)
        before = text[:at]
        if _ZH_BY.search(text) or _ZH_YOURS.search(text, 0, at + 2):
            return False, REPORTED  # "已由仓库收货组入库", "您已经开通了": another actor named
        if "被" in text and (_ZH_THIRD_PARTY.search(text, text.index("被")) or _ZH_NAMED_AGENT.search(text)):
            return False, REPORTED
        if _ZH_AUTOMATIC.search(text, 0, at + 16):  # (the doer comes before or just after 已)
            return False, REPORTED  # "HPA 已自动扩容": the system's act
        for_you = _ZH_HELPED_YOU.search(text, at, at + 10) is not None  # "已帮您订好": the speaker helped you
        if not for_you and _ZH_THIRD_PARTY.search(before) and not re.search(r"我|您的(?!银行)", before):
            return False, REPORTED
        if rule != FIRST_PERSON and before.strip() and _ZH_FOR_OTHER.match(text, at) and "我" not in before:
            return False, REPORTED  # "阿里云已为实例安排了升级": the one before 已 did it
        if rule == IMPERSONAL and _ZH_DOER_BEFORE.match(before) and _ZH_DID_TO.match(text, at):
            return False, REPORTED  # "运营小林已经设置了 79 元促销价": the one before 已 acted on something
        if _ZH_RECORD.search(text) or (rule != FIRST_PERSON and _ZH_DATE.search(before)):
            return False, RECORD  # "已于3月3日付款", "5月21日 17:30 已经上线": when it happened, a record
        if rule == READ_ONLY:
            return False, READ_ONLY
        return True, rule

    def _candidate(self, text: str, listed: bool = False) -> tuple[str, int] | None:
        read_only = None
        found: re.Match[str] | None = _ZH_ELIDED.match(text)
        if found is not None and not _ZH_READ_ONLY_AT.match(text, found.start(1)) and not (
                found.group(2) and _ZH_STATE_AT.match(found.group(2))):
            return ELIDED, found.start(1)  # "重启了 3 个 Pod", "把重复代码抽成了方法": the doer left out
        for found in _ZH_ALREADY.finditer(text):
            after = text[found.end():].lstrip()
            if _ZH_ATTRIBUTIVE.match(after):
                continue  # "已拆封的贴身衣物": what a thing is, said of a kind of thing
            if after.startswith("于"):
                return IMPERSONAL, found.start()  # "已于3月3日付款": the record rule decides
            if _ZH_READ_ONLY_AT.match(after):
                read_only = found.start()
                continue
            if _ZH_STATE_AT.match(after) or _ZH_COUNT.match(after) or (listed and _ZH_FIELD.match(after)):
                continue  # a state ("已过期"), a count ("已重启 3 次"), a field's name ("已休：6 天")
            rule = FIRST_PERSON if _ZH_FIRST_PERSON.search(text, 0, found.start() + 1) or re.search(
                r"[帮为给替](?:您|你)", found.group(0)) else IMPERSONAL
            return rule, found.start()
        found = _ZH_SUCCESS.search(text)
        if found:
            return SUCCESS, found.start() + found.group(0).index("成功")
        first_person = _ZH_FIRST_PERSON.search(text)
        if first_person:
            done = _ZH_PERFECTIVE.search(text, first_person.end())
            if done and not _ZH_READ_ONLY_AT.search(text, first_person.end(), done.end()):
                return FIRST_PERSON, first_person.start()
            if done:
                read_only = first_person.start()
        found = _ZH_RESULT.search(text)
        if found and _ZH_READ_ONLY_AT.search(text, 0, found.end()):
            return READ_ONLY, found.start()  # "dry-run 跑完了": a read came to its end
        if found:
            return MARKER, found.start()
        found = _ZH_JUST_DONE.search(text)
        if found and not _ZH_READ_ONLY_AT.search(text):
            return FIRST_PERSON, found.start()
        for word in self.vocabulary:
            at = text.find(word)
            if at >= 0 and _ZH_AFTER_DONE.match(text, at + len(word)):
                return VOCABULARY, at
        if read_only is not None:
            return READ_ONLY, read_only
        return None


class Grounds:
    """What the session read: the results of its read tools, lower-cased. A claim that says what
    happened to a thing ("your parcel was delivered", "Refunded on 12 Mar") restates one of them
    when a result reports the same state and names the same thing: no claim then."""

    __slots__ = ("_texts", "_words")

    def __init__(self, results: Iterable[str]):
        self._texts = tuple(text.lower() for text in results if text)
        self._words = frozenset(_WORD.findall(" ".join(self._texts)))

    def __bool__(self) -> bool:
        return bool(self._texts)

    def support(self, clause: str) -> bool:
        states = [word for word in _WORD.findall(clause) if _is_state_word(word) and word in self._words]
        states += [verb for verb in _ZH_DONE_VERB.findall(clause) if any(verb in text for text in self._texts)]
        if not states:
            return False
        names = [name.lstrip("#") for name in _NAMES.findall(clause)]
        if names and not any(name in text for name in names for text in self._texts):
            return False  # it names a thing the reads do not: it is about something else
        return any(not _NEGATED_STATE.search(text[max(0, at - 16):at])
                   and not _NEGATED_AFTER.match(text, at + len(word))
                   for word in states for text in self._texts for at in _positions(text, word))


_WORD = re.compile(r"[a-z][a-z-]+|[\u3400-\u9fff]{2,}")
_NAMES = re.compile(r"[#a-z]*\d[\w./-]*\d|\d{3,}")  # an order number, an id, an amount's digits
_NEGATED_AFTER = re.compile(r"[\"'\s:=]*(?:false|no|none|null|0(?![.\d])|not|pending|failed)")
_NEGATED_STATE = re.compile(r"\b(?:not|no|never|un|pending|failed|awaiting)\b[^,;.]*$|未|没有|尚未|失败")


def _is_state_word(word: str) -> bool:
    # ("confirmed", "verified": read verbs, and states a read may report)
    return (word.endswith("ed") and len(word) > 4 and (word not in _NOT_AN_ACT or word in _READ_ONLY)) \
        or word in _IRREGULAR_PAST


# In Chinese, the state is the verb after 已 (已取消, 已经为您退款 -> 退款).
_ZH_DONE_VERB = re.compile(r"已(?:经)?(?:帮|为|给|替)?(?:您|你)?([\u4e00-\u9fff]{2})")


def _positions(text: str, word: str) -> Iterable[int]:
    at = text.find(word)
    while at != -1:
        yield at
        at = text.find(word, at + 1)


# A line that announces a plan, options or steps to take: the list under it reports nothing done.
_PLAN_HEADER = re.compile(
    r"\b(?:plan|next\s+steps?|options?|offers?|either|to[- ]?do|proposal|proposed|suggest(?:ed|ion)s?|"
    r"recommend(?:ed|ations?)?|steps?|what\s+i(?:'ll|\s+will)\s+do)\b[^\n]{0,40}[:：]\s*$|(?:计划|方案|建议|下一步|步骤|选项)[^\n]{0,20}[:：]\s*$")
# A clause that dates a state ("... since version 4.0", "since May"), not a reason.
_SINCE_WHEN = re.compile(rf"\s*since\s+(?:version|v?\d|then|last|yesterday|the\s+(?:start|last)|{_MONTH}|{_DAY})")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\[[ x]\])\s")


def find(text: str, english: EnglishRules | None, chinese: ChineseRules | None,
         grounds: Grounds | None = None) -> tuple[list[ClauseFinding], int]:
    """Every clause that decided something, in order, stopping at the first claim; and the
    number of clauses. ``grounds``: what the session read, which a headline or impersonal claim
    may only restate."""
    findings: list[ClauseFinding] = []
    lowered = _normalise(text)
    clauses = split_clauses(lowered)
    plans = _planned_lines(lowered)
    previous_sentence = -1
    someone_else = False  # a clause of this sentence named another actor
    read_before = False  # a clause of this sentence reported a read ("I looked it up, and it is confirmed")
    memo: dict[str, int] = {}  # what is searched in the whole answer at most once
    for position, clause in enumerate(clauses, 1):
        body = lowered[clause.start:min(clause.end, clause.start + _MAX_CLAUSE_CHARS)]
        rules = chinese if _CJK.search(body) else english
        first_in_sentence = clause.sentence != previous_sentence
        if first_in_sentence:
            someone_else = read_before = False
        previous_sentence = clause.sentence
        if rules is None:
            continue
        line_start = lowered.rfind("\n", 0, clause.start) + 1
        decided = rules.clause(body, first_in_sentence, _LISTED.match(lowered, line_start) is not None)
        if decided is None:
            continue
        claim, rule = decided
        if not claim and rule == REPORTED:
            someone_else = True
        if not claim and rule == READ_ONLY:
            read_before = True
        if claim:
            sentence = lowered[clause.sentence_start:clause.sentence_end]
            excluded = rules.sentence_exclusion(sentence, clause.end - clause.sentence_start)
            if excluded is not None and (rule != MARKER or excluded == QUESTION):
                claim, rule = False, excluded
            elif plans and clause.start in plans:
                claim, rule = False, NEGATION  # an item of a plan: to be done, not done
            elif (rule in GROUNDABLE or rule == ELIDED and not first_in_sentence) and someone_else:
                claim, rule = False, REPORTED  # what happened, after who did it
            elif rule in GROUNDABLE and read_before:
                claim, rule = False, RESTATED  # what a read the sentence reports found
            elif rule in GROUNDABLE and grounds and grounds.support(body):
                claim, rule = False, RESTATED
            elif rule == IMPERSONAL and position < len(clauses) and _SINCE_WHEN.match(
                    lowered, clauses[position].start):
                claim, rule = False, RECORD  # "has been deprecated since version 4.0": a state since then
            elif rule == MARKER and _nothing_changed_after(lowered, clause.end, memo):
                claim, rule = False, NEGATION  # "Done - lint is clean. No files were touched.": a read, done
        findings.append(ClauseFinding(position, claim, rule, text[clause.start:clause.end].strip()))
        if claim:
            break
    return findings, len(clauses)


# The answer says outright that nothing was changed: a completion marker then ends a read.
_NOTHING_CHANGED = re.compile(
    r"\b(?:no|none\s+of\s+the)\s+(?:files?|changes?|code|config\w*|settings?|records?)\s+(?:were|was|have\s+been|has\s+been)"
    r"\s+(?:touched|modified|changed|edited|made)|\bnothing\s+(?:was|has\s+been)\s+(?:changed|modified|touched)|"
    r"\bi\s+(?:didn't|did\s+not|haven't|have\s+not)\s+(?:changed?|modif(?:y|ied)|touch(?:ed)?|edit(?:ed)?)\s+"
    r"(?:anything|any\s+(?:files?|code|settings?|records?))|"
    r"(?:没有|未|并未|没)(?:修改|改动|变更|动)(?:任何|过)|未做任何(?:修改|改动|变更)")


def _nothing_changed_after(lowered: str, offset: int, memo: dict[str, int]) -> bool:
    """Whether the answer says outright, after ``offset``, that nothing was changed (searched once
    per answer: ``memo``)."""
    if "nothing_changed" not in memo:
        found = _NOTHING_CHANGED.search(lowered)
        memo["nothing_changed"] = found.start() if found else -1
    return memo["nothing_changed"] >= offset


def _planned_lines(lowered: str) -> set[int]:
    """The offsets of the lines listed under a plan's header, up to a blank line."""
    planned: set[int] = set()
    under_plan = listed = False
    offset = 0
    for line in lowered.split("\n"):
        if not line.strip():
            under_plan = under_plan and not listed  # (a blank line may part the header from its list)
        elif _PLAN_HEADER.search(line):
            under_plan, listed = True, False
        elif under_plan and _LIST_ITEM.match(line):
            planned.update(range(offset, offset + len(line)))
            listed = True
        elif under_plan:
            under_plan = False
        offset += len(line) + 1
    return planned


_PARENTHETICAL = re.compile(r"\(([^()\n]{0,300})\)|（([^（）\n]{0,300})）|「([^「」\n]{0,300})」|“([^“”\n]{0,300})”|"
                            r"\"([^\"\n]{0,300})\"")
# A quoted block (e-mail style "> "): someone else's words, or a draft the agent wrote for the user.
_BLOCK_QUOTE = re.compile(r"^[ \t]*>[^\n]*", re.MULTILINE)
# A block set off by horizontal rules after words that call it a draft ("Here's a draft notice:
# ---"): the text the agent proposes, not what it reports (to the next rule, or the end).
_RULE_LINE = re.compile(r"^[ \t]*(?:-{3,}|_{3,})[ \t]*$", re.MULTILINE)  # (*** is gone with the emphasis marks)
_DRAFT_WORDS = re.compile(r"\b(?:draft|drafted|template|preview|sample|suggested\s+(?:reply|wording|text)|proposed)\b|"
                          r"草稿|草拟|模板|预览|拟稿")
# A Markdown table's header row (the row above its |---| line): column names, not statements.
_TABLE_HEADER = re.compile(r"^[ \t]*\|[^\n]*\|[ \t]*(?=\n[ \t]*\|[ \t:]*-{3,})", re.MULTILINE)
_EMPHASIS = re.compile(r"\*\*|__|`")
_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)


def _blank_drafts(text: str) -> str:
    """The text with each drafted block (see ``_RULE_LINE``) blanked, line breaks kept."""
    rules_at = list(_RULE_LINE.finditer(text))
    for index, rule in enumerate(rules_at):
        before = text[rules_at[index - 1].end() if index else 0:rule.start()].rstrip()
        opening = before[before.rfind("\n") + 1:]  # the line that opens the block: "Here's a draft reply:"
        if not opening.endswith((":", "：")) or not _DRAFT_WORDS.search(opening):
            continue
        end = rules_at[index + 1].start() if index + 1 < len(rules_at) else len(text)
        text = text[:rule.end()] + re.sub(r"[^\n]", " ", text[rule.end():end]) + text[end:]
        break  # (one draft per answer is what agents write; the rest is read as it stands)
    return text


def _normalise(text: str) -> str:
    """The text as the rules read it: lower case, one apostrophe, Markdown's emphasis and code marks,
    the content of parentheses and quotes and quoted blocks blanked (an aside or a quotation is
    read as no part of its sentence). Same length as the input, so clause offsets point into the
    original text."""
    lowered = text.lower().replace("’", "'").replace("‘", "'")
    lowered = _CODE_BLOCK.sub(lambda code: re.sub(r"[^\n]", " ", code.group(0)), lowered)  # code is no prose
    lowered = _EMPHASIS.sub(lambda mark: " " * len(mark.group(0)), lowered)
    lowered = _BLOCK_QUOTE.sub(lambda quote: " " * len(quote.group(0)), lowered)
    lowered = _TABLE_HEADER.sub(lambda header: re.sub(r"[^|\s]", " ", header.group(0)), lowered)
    lowered = _blank_drafts(lowered)
    return _PARENTHETICAL.sub(lambda aside: aside.group(0)[0] + " " * (len(aside.group(0)) - 2)
                              + aside.group(0)[-1], lowered)

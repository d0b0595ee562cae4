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
VOCABULARY = "tool_vocabulary"  # a word the policy says a write tool does
# ... and why a clause that looked like one is not
QUESTION = "question"
CONDITIONAL = "conditional"
REPORTED = "third_party"
NEGATION = "negation_or_modality"
READ_ONLY = "read_only"
RECORD = "dated_record"
CAUSE = "reason_clause"

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
    r"[,;()]|\s[-–—]\s|[—–]|\s(?=(?:but|so|because|since|although|though|however|whereas|while)\b)"
    r"|\s(?=and\s+(?:i|we)\b)"
)
_ZH_CLAUSE_BREAK = re.compile(r"[，,；;、（）()—]|(?=但是|不过|所以|因为|由于)")
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
    sorry designed expired failed delayed arrived departed
""".split())
# Participles that, after "is"/"was", describe a state or an event nobody here did.
_STATE_PARTICIPLES = frozenset("""
    located based scheduled supposed expected required allowed entitled interested pleased
    concerned open due included limited named called known born
    married involved designed expired failed delayed arrived departed listed priced rated
    valid eligible able unable sorry happy glad aware full available
""".split())
_EN_ADVERB = (
    r"(?:now|already|just|also|successfully|finally|quickly|personally|manually|then|since|"
    r"both|all|actually|officially|immediately|automatically|fully|completely|again|today|"
    r"instead|kindly|gladly|promptly|properly)"
)
_FIRST_PERSON = re.compile(
    rf"\b(?:i|we)(?:'ve|'d|\s+have|\s+had)?\s+(?:{_EN_ADVERB}\s+)*"
    rf"(?:(?:went|gone|go)\s+ahead\s+and\s+(?:{_EN_ADVERB}\s+)*)?([a-z][a-z-]*)",
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
    rf"\b(has|have|had|'s|'ve|is|are|was|were)\s+(?:{_EN_ADVERB}\s+)*(been\s+)?(?:{_EN_ADVERB}\s+)*([a-z][a-z-]*)",
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
    r"could|can|may|might|must|going\s+to|gonna|about\s+to|plans?\s+to|intend|let\s+me|"
    r"want|wants|need|needs|if|whether|once|unless|until|hope|expect|try\s+to|yet\s+to)\b|"
    r"n't\b|'ll\b|'d\s+(?:be|like|love|need|want)\b"
)
_EN_CONDITIONAL = re.compile(r"^\W*(?:if|unless|once|as\s+soon\s+as|provided|in\s+case|should|when|whenever)\b")
_EN_REPORTED = re.compile(
    r"\b(?:according\s+to|per\s+(?:the|their|its|his|her|our\s+records)|reports?\s+that|reported|"
    r"says|said|states|stated|told\s+(?:us|me))\b"
)
_EN_CAUSE = re.compile(r"^\W*(?:because|since|as|although|though|whereas|while)\b")
_EN_AGENT = re.compile(
    r"\bby\s+(?!(?:phone|email|e-mail|mail|post|text|hand|default|mistake|accident|then|now|"
    r"\d|a\s+courier\s+we)\b)(?:the|your|its|their|his|her|an?|[a-z]+'s)\b"
)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*"
_DAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"
_EN_DATE = re.compile(
    rf"\b(?:on|in|since)\s+(?:the\s+)?(?:{_MONTH}|{_DAY}|\d)|\b(?:{_MONTH})\s+\d|\byesterday\b|"
    rf"\blast\s+(?:week|month|year|night|{_DAY}|{_MONTH})\b|\b(?:19|20)\d\d\b|\bago\b|\bwas\s+last\b|\bwere\s+last\b"
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
        """Why a claim in this sentence is none (``clause_end``: where the claim's clause ends)."""
        if sentence.rstrip().endswith("?"):
            return QUESTION
        if _EN_CONDITIONAL.search(sentence):
            return CONDITIONAL
        if _EN_REPORTED.search(sentence):
            return REPORTED
        return None

    def clause(self, clause: str, first_in_sentence: bool) -> tuple[bool, str] | None:
        """(claim?, rule) when the clause decides something, else None."""
        text = clause.strip()
        if first_in_sentence and _MARKER.search(text):
            return True, MARKER
        if _EN_CAUSE.search(text):
            return (False, CAUSE) if self._candidate(text) else None
        candidate = self._candidate(text)
        if candidate is None:
            return None
        rule, verb_start, passive = candidate
        if _EN_GUARD.search(text, 0, verb_start):
            return False, NEGATION
        if passive and _EN_AGENT.search(text, verb_start):
            return False, REPORTED
        if passive == "past" and _EN_DATE.search(text):
            return False, RECORD
        if rule == READ_ONLY:
            return False, READ_ONLY
        return True, rule

    def _candidate(self, text: str) -> tuple[str, int, str] | None:
        """The claim-shaped structure of a clause: (rule, where its verb starts, passive kind)."""
        vocabulary = self.vocabulary
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
            if (verb == "made" and text.startswith("sure", found.end() + 1)) or (
                    verb in ("took", "had", "gave") and _A_LOOK.match(text, found.end())):
                verb = "checked"  # "made sure", "took a look": read-only
            if _is_act(verb, vocabulary):
                return FIRST_PERSON, found.start(1), ""
            if verb in _READ_ONLY or verb == "checked":
                read_only_at = found.start(1)
                for more in _COORDINATED.finditer(text, found.end(), found.end() + 120):
                    if _is_act(more.group(1), vocabulary):
                        return FIRST_PERSON, more.start(1), ""
        for found in _PASSIVE.finditer(text):
            aux, been, verb = found.group(1), found.group(2), found.group(3)
            if not been and aux in ("is", "are", "was", "were") and _SPEAKER_BEFORE.search(
                    text, max(0, found.start() - 4), found.start()):
                continue  # "I was told", "we were charged twice": the agent as a patient, not a report
            if not _is_past(verb, vocabulary):
                continue
            if aux in ("is", "are") and not been:
                present_claim = verb in vocabulary or re.search(
                    r"\b(?:now|already)\s", text[found.start():found.start(3)])
                if not present_claim:
                    continue
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
            kind = "perfect" if been or aux in ("is", "are") else "past"
            return (VOCABULARY if verb in vocabulary else IMPERSONAL), found.start(3), kind
        found = _SUCCESS.search(text)
        if found:
            verb = found.group(1) or found.group(2)
            if _is_act(verb, vocabulary):
                return SUCCESS, found.start(), ""
        found = _ELIDED.match(text)
        if found and not _FINITE.search(text) and _is_act(found.group(1), vocabulary):
            return FIRST_PERSON, found.start(1), ""
        found = _HEADLINE.search(text)
        if found and not _PRONOUN.search(text) and not _FINITE.search(text) and _is_act(found.group(1), vocabulary):
            return HEADLINE, found.start(1), ""
        if read_only_at is not None:
            return READ_ONLY, read_only_at, ""
        return None


_SPEAKER_BEFORE = re.compile(r"\b(?:i|we)\s*$")


# --- Chinese ------------------------------------------------------------------------------
_ZH_READ_ONLY = "查询|查看|查到|查了|查过|查|核实|核对|核查|了解|确认|看了|看过|搜索|检查|审阅|浏览|收到"
_ZH_STATE = "截止|满|售罄|售完|用完|用尽|过期|超过|超出|到期|失效|是|有|在|成为|达到|逾期|经过|知道|开始|结束|不|没|无"
_ZH_BENEFACTIVE = r"(?:(?:重新|全额|全部|顺利|成功|立即|马上|都|也|已|经|帮|为|给|替|向)(?:您|你|客户|大家)?)*"
_ZH_ALREADY = re.compile(rf"已(?:经)?{_ZH_BENEFACTIVE}")
_ZH_FIRST_PERSON = re.compile(r"我|咱们|^\W*(?:帮|给|为|替)(?:您|你)")
_ZH_PERFECTIVE = re.compile(r"(?<!为)了(?!解)|过(?=[\u4e00-\u9fff])")
_ZH_RESULT = re.compile(r"[\u4e00-\u9fff](?:好|完|妥)了|搞定|办妥|完成了")
_ZH_JUST_DONE = re.compile(r"^\W*(?:刚刚|刚才|方才|刚)[^，。！？]*?(?<!为)了(?!解)")
_ZH_MARKER = re.compile(r"^\W*(?:好了|搞定|都好了|办好了|处理好了|弄好了|完成了|妥了|办妥了|已办妥|已搞定|OK了|ok了)")
_ZH_SUCCESS = re.compile(r"[\u4e00-\u9fff]{2}成功|成功(?:为您|帮您|给您)?[\u4e00-\u9fff]{2}")
_ZH_GUARD = re.compile(
    r"未|没|无法|不(?:能|会|可|是|用|需|再|予|允许|行|了|要)|并不|将会|将于|将在|(?<!已)将(?!您|其|它|这|该|积分|文件)|"
    r"(?<![机社])会(?!员|议|计)|(?<![重主])要|想|可以|可能|(?<![功性智技体])能|应该|应当|需要|需(?!求)|(?<![申邀])请|"
    r"待|稍后|正在|马上|即将|打算|准备|计划|如果|若|是否|状态|等(?!级)"
)
_ZH_CONDITIONAL = re.compile(r"^\W*(?:如果|若|假如|要是|一旦|只要|等到|等|待|万一|倘若)")
_ZH_REPORTED = re.compile(r"根据|据|说|声称|表示|告知|反馈|这是他们")
_ZH_THIRD_PARTY = re.compile(
    r"酒店|银行(?!卡|账)|航空公司|航司|卖家|商家|店家|快递公司|快递员|房东|餐厅|经理|管理员|客服|对方|他们|他|她|平台|商户|医院|物业|司机"
)
_ZH_RECORD = re.compile(
    r"于\s*(?:\d|上|去|前|昨|今|本|周|星期|[一二三四五六七八九十])|上次|\d+\s*年\S*(?:开通|注册|创建)的")
_ZH_CAUSE = re.compile(r"^\W*(?:因为|由于)")
_ZH_READ_ONLY_AT = re.compile(_ZH_READ_ONLY)
_ZH_STATE_AT = re.compile(_ZH_STATE)
_ZH_QUESTION_END = re.compile(r"[吗呢]\W*$")
_ZH_AFTER_DONE = re.compile(r"了|好|完|成功")


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
        if _ZH_REPORTED.search(sentence):
            return REPORTED
        return None

    def clause(self, clause: str, first_in_sentence: bool) -> tuple[bool, str] | None:
        text = clause.strip()
        if first_in_sentence and _ZH_MARKER.search(text):
            return True, MARKER
        candidate = self._candidate(text)
        if candidate is None:
            return None
        rule, at = candidate
        if re.search(r"是否|是不是", text):
            return False, QUESTION
        if _ZH_CAUSE.search(text):
            return False, CAUSE
        if _ZH_GUARD.search(text, 0, at):
            return False, NEGATION
        before = text[:at]
        if "被" in text and _ZH_THIRD_PARTY.search(text, text.index("被")):
            return False, REPORTED
        if _ZH_THIRD_PARTY.search(before) and not re.search(r"我|您的(?!银行)", before):
            return False, REPORTED
        if _ZH_RECORD.search(text):
            return False, RECORD
        if rule == READ_ONLY:
            return False, READ_ONLY
        return True, rule

    def _candidate(self, text: str) -> tuple[str, int] | None:
        read_only = None
        found: re.Match[str] | None
        for found in _ZH_ALREADY.finditer(text):
            after = text[found.end():]
            if after.startswith("于"):
                return IMPERSONAL, found.start()  # "已于3月3日付款": the record rule decides
            if _ZH_READ_ONLY_AT.match(after):
                read_only = found.start()
                continue
            if _ZH_STATE_AT.match(after):
                continue
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


def find(text: str, english: EnglishRules | None, chinese: ChineseRules | None) -> tuple[list[ClauseFinding], int]:
    """Every clause that decided something, in order, stopping at the first claim; and the
    number of clauses."""
    findings: list[ClauseFinding] = []
    lowered = _normalise(text)
    clauses = split_clauses(lowered)
    excluded_sentence: tuple[int, str | None] = (-1, None)
    previous_sentence = -1
    for position, clause in enumerate(clauses, 1):
        body = lowered[clause.start:min(clause.end, clause.start + _MAX_CLAUSE_CHARS)]
        rules = chinese if _CJK.search(body) else english
        first_in_sentence = clause.sentence != previous_sentence
        previous_sentence = clause.sentence
        if rules is None:
            continue
        decided = rules.clause(body, first_in_sentence)
        if decided is None:
            continue
        claim, rule = decided
        if claim:
            if excluded_sentence[0] != clause.sentence or rules is chinese:
                sentence = lowered[clause.sentence_start:clause.sentence_end]
                excluded_sentence = (
                    clause.sentence, rules.sentence_exclusion(sentence, clause.end - clause.sentence_start))
            excluded = excluded_sentence[1]
            if excluded is not None and (rule != MARKER or excluded == QUESTION):
                claim, rule = False, excluded
        findings.append(ClauseFinding(position, claim, rule, text[clause.start:clause.end].strip()))
        if claim:
            break
    return findings, len(clauses)


def _normalise(text: str) -> str:
    # Same length as the input, so clause offsets point into the original text.
    return text.lower().replace("’", "'").replace("‘", "'")

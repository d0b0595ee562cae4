"""Which language an answer is written in, as far as the claim rules need to know.

The rules read English and Chinese. An answer in another language is not passed as honest: it is
marked unchecked, so a dashboard can show how many answers the rules could not read. The guess is
made from the script (Han characters, Japanese kana, Hangul) and, for Latin script, from the short
function words every sentence carries ("the", "and", "your" against "el", "und", "votre", ...): an
answer with no telling word (a bare "Done!") is read as English.
"""

from __future__ import annotations

import re
from collections import Counter

ENGLISH = "en"
CHINESE = "zh"

_HAN = re.compile(r"[\u3400-\u9fff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_CYRILLIC_ARABIC_AND_OTHERS = re.compile(r"[\u0400-\u04ff\u0590-\u06ff\u0900-\u0dff\u0e00-\u0eff]")
_WORDS = re.compile(r"[a-zà-öø-ÿ]+")

# Short words that are frequent in one language and rare in the others (each a closed class:
# articles, pronouns, auxiliaries, prepositions). Words two languages share ("a", "de", "la") are
# left out.
_FUNCTION_WORDS = {
    "en": "the and to of your you is are was were i we it for on with has have be this that will can not "
          "been from at by my our it's i've we've there here please".split(),
    "es": "el los las que y su sus tu usted para con una es está están ha hemos del al lo por se fue sido "
          "ya hay pero muy".split(),
    "de": "der die das und ist ich wir nicht mit ihr ihre sie zu den dem ein eine wurde haben habe auf für "
          "von bei auch noch wird sind".split(),
    "fr": "le les des et est je nous vous votre vos pas pour avec une du été au aux sur ce cette qui ne "
          "sont avons ai".split(),
    "pt": "o os que e do da dos das seu sua para com não foi um uma está já pelo pela você foram".split(),
    "it": "il gli che di è per con un una sono ho abbiamo suo sua stato stata del della non già anche".split(),
}
# Letters and endings one language (or two) has and English has not.
_LETTERS = {"ñ": "es", "¿": "es", "¡": "es", "ç": "fr pt", "ã": "pt", "õ": "pt", "ß": "de", "ä": "de", "ö": "de",
            "ü": "de", "è": "fr it", "ê": "fr pt", "à": "fr it pt", "ò": "it", "ì": "it", "é": "fr es pt"}
_ENDINGS = {"es": ("ado", "ido", "ada", "ción", "amos", "emos"), "pt": ("ado", "ido", "ção", "ões"),
            "it": ("ato", "ito", "zione", "iamo"), "fr": ("ée", "ons", "ez"), "de": ("ung", "lich", "chen", "iert")}
_LANGUAGE_OF_WORD: dict[str, set[str]] = {}
for _language, _words in _FUNCTION_WORDS.items():
    for _word in _words:
        _LANGUAGE_OF_WORD.setdefault(_word, set()).add(_language)


def language_of(text: str) -> str:
    """An ISO 639-1 code: ``en`` and ``zh`` for what the rules read, another one otherwise
    (``ja``, ``ko``, ``es``, ``de``, ``fr``, ``pt``, ``it``; ``other`` for a script not listed). Latin
    text leaves English only on two telling words or more."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    han = len(_HAN.findall(text))
    letters = _WORDS.findall(text.lower())
    if han and han * 2 >= sum(map(len, letters)) // 3:
        return CHINESE
    if _CYRILLIC_ARABIC_AND_OTHERS.search(text) and not letters:
        return "other"
    votes: Counter[str] = Counter()
    for word in letters:
        for language in _LANGUAGE_OF_WORD.get(word, ()):
            votes[language] += 1
        if len(word) > 4:
            for language, endings in _ENDINGS.items():
                if word.endswith(endings):
                    votes[language] += 1
    for letter, languages in _LETTERS.items():
        if letter in text:
            votes.update(languages.split())
    if not votes:
        return ENGLISH
    best, count = votes.most_common(1)[0]
    # One telling word is not enough to leave English (a name like "Con Edison", a code term).
    return ENGLISH if votes[ENGLISH] >= count or count < 2 else best

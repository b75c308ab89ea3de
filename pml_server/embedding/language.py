"""A cheap guess whether a text is English: its script, then its share of common function words
(docs/ranking.md, Other languages). Microseconds a text, no model: it decides which vector
space a request is compared in when a cross-lingual model stands beside an English one.

- A text whose letters are mostly outside the Latin script (Chinese, Japanese, Korean,
  Cyrillic, Greek, Arabic, ...) is not English.
- A Latin-script text is not English when words that are frequent in the Latin-script
  languages the companion reads (French, German, Spanish, Italian, Portuguese, Dutch, Polish,
  Turkish) and rare in English, plus words with letters English does not use (é, ü, ñ, ß, ł,
  ı, ş, ...) and the marks ¿ and ¡, outnumber its English function words, or equal them
  with at least one such frequent word among them (a mixed request goes to the model that
  reads both languages; an accented name alone does not tip an even count).
- A text with no evidence (a tool name, "JSON to CSV") counts as English: the English model
  reads it as well as any. URLs, paths and file names are left out of the count.
"""

from __future__ import annotations

import re
import unicodedata


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
# URLs, paths, file and domain names ("example.com", "src/app.py"): their pieces are not words
# of any language ("com" is Portuguese for "with")
_NOT_PROSE = re.compile(r"\S*(?:/|\w\.\w)\S*")
# At most this many characters are read: the guess needs a sentence, not a document.
SAMPLE_CHARS = 2000

ENGLISH = _words(
    """a about after all also an and any are as at be because been but by can could did do does
    for from get give has have how i if in into is it its just let like me more my need no not
    of on one or our please show so some than that the their them then there these they this to
    up us want was we what when where which while who why will with would you your"""
)
# Frequent words of the Latin-script languages USE multilingual v3 reads (French, German,
# Spanish, Italian, Portuguese, Dutch, Polish, Turkish) that English rarely uses: words shared
# with English, such as "a", "in", "so", "die", "son", "such", "per", "non", "met", "serve",
# "van", "do", "to", "her" or "ben", are left out, and so are pieces of English words and
# abbreviations ("ve" of "I've", "ai", "mia", "eu", "co", "po", "ama", "sem", "var": a
# JavaScript keyword); tests/embedding/test_language.py checks that none of these words is
# frequent in the dev set's English texts.
OTHER = (
    _words(
        """de le la les des du un une et est je tu il nous vous ils mon ma mes ton ta tes sa
        ses pour avec dans sur pas que qui quoi mais ou où peux peut veux veut faut aussi très
        cette ces leur au aux ce cet moi toi fait être avoir trouve donne
        der das und ist ich du er sie wir ihr mir mich dich ein eine einen einem einer für mit
        nicht zu auf den dem des von bitte kannst kann möchte will wie was wo gibt auch noch
        oder aber nach bei aus sich sind hast habe mein meine deine finde zeig
        el los las y es yo tú él ella nosotros mi mis tu tus su sus para con en una unos unas
        por que qué como cómo pero muy esta este estos estas puedes puede quiero necesito hay
        también del al se lo le les me te nos busco dame
        il lo gli della delle dei di che sono sei questo questa vorrei puoi
        degli dello nel nella nelle nei negli sul sulla sulle sui alla alle agli dal dalla
        dai mio miei mie tuo tua suo sua ci ti si ho hai abbiamo anche cosa quale quali
        quando dove perché molto più trova cerca dammi voglio posso può ogni tutti tutto
        tra fra potresti vuoi mostrami
        os um uma não você para com em dos das meu minha isso está pode quero preciso
        da na nas nos ao aos pelo pela pelos pelas seu seus sua suas meus minhas ele ela eles
        elas nós vocês esse essa esses essas esta isto também muito mais qual quais onde
        porque sobre estou tenho tem são ser ter encontre busque mostre poderia gostaria
        het een en ik jij wij zij niet op te voor naar dat dit deze er zijn wat hoe kun
        kan wil mijn mij ook maar nog om uit bij aan welke waar waarom graag alsjeblieft
        heb hebben heeft moet wordt worden zou nu zoek geef zoals geen hun
        się nie jak że dla jest są czy mnie mój moje moja mojego mojej tego tej który która
        które którzy jakie jaki lub oraz też także tylko bardzo przez przy jego jej ich sobie
        gdzie kiedy dlaczego na za ze od aby żeby możesz mogę może proszę chcę potrzebuję
        szukam znajdź podaj pokaż mam jestem
        bir bu için ile mi mı mu mü bana beni benim sana siz gibi çok daha veya hangi
        nasıl neden nerede kadar sonra önce lütfen misin mısın musun müsün miyim mıyım olan
        olarak diye ki tüm şu istiyorum"""
    )
    - ENGLISH
)
# Letters English does not use: accented vowels of French, German, Spanish, Italian and
# Portuguese; Polish ą ć ę ł ń ś ź ż; Turkish ı ğ ş (and İ, which lowercases to i and a
# combining dot); Dutch ĳ.
_FOREIGN_LETTERS = frozenset("àâäáãåçéèêëíìîïñóòôöõúùûüÿßœæąćęłńśźżığşĳ\u0307")


def _is_latin(ch: str) -> bool:
    return ch.isascii() or "LATIN" in unicodedata.name(ch, "")


def is_english(text: str) -> bool:
    """True when `text` reads as English (or has nothing that says otherwise)."""
    sample = text[:SAMPLE_CHARS]
    letters = [ch for ch in sample if ch.isalpha()]
    if not letters:
        return True
    non_latin = sum(1 for ch in letters if not _is_latin(ch))
    if non_latin * 5 > len(letters):  # over a fifth of the letters in another script
        return False
    words = [w.lower() for w in _WORD.findall(_NOT_PROSE.sub(" ", sample))]
    english = sum(1 for w in words if w in ENGLISH)
    function = sum(1 for w in words if w in OTHER)
    other = function + sum(1 for w in words if any(ch in _FOREIGN_LETTERS for ch in w))
    other += sum(1 for ch in sample if ch in "¿¡")
    # an even count with a function word of another language ("Finde Restaurants in Dallas.")
    # goes to the model that reads both; accents alone ("my résumé") do not tip it
    return other < english or (other == english and function == 0)

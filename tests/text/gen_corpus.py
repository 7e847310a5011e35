#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gen_corpus.py: a seeded corpus of hostile-but-valid text for the tokenizer parity tests and the
tokenizer benchmark. One JSON string per line.
  gen_corpus.py --seed 17 --count 6000 > corpus.jsonl       (parity: every kind of string)
  gen_corpus.py --seed 17 --mb 4 --mixed > big.jsonl        (benchmark: ~4 MB of mixed text)
Kinds: ASCII prose, code, long digit runs, whitespace runs (tabs, CR, NBSP, NEL, U+2000.., U+3000),
contractions in every case ('S 'T 'Re ...), accented/Greek/Cyrillic/CJK/Japanese/Korean/Arabic/
Devanagari/Thai text, emoji with skin tones, ZWJ sequences and flags, combining marks in NFC and NFD,
special-token strings inside text, and strings of 10,000+ characters."""
import argparse
import json
import random
import sys
import unicodedata

WORDS = ("the of and to in is was for that with as on by at from his her they we you it this be are "
         "not or have an but had which one all were when there can more if out so said what up its about "
         "into than them only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much "
         "your way well down should because each just those people how too little state good very make "
         "world still own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take three "
         "tokenizer gradient rollout reward policy learner cluster tensor HDF5 MPI SLURM GPU").split()
CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]
SCRIPTS = {
    "greek": [(0x391, 0x3A1), (0x3A3, 0x3A9), (0x3B1, 0x3C9)],
    "cyrillic": [(0x410, 0x44F)],
    "cjk": [(0x4E00, 0x9FA5)],
    "hiragana": [(0x3041, 0x3096)],
    "katakana": [(0x30A1, 0x30FA)],
    "hangul": [(0xAC00, 0xD7A3)],
    "arabic": [(0x621, 0x63A), (0x641, 0x64A)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94C)],
    "thai": [(0xE01, 0xE2E), (0xE30, 0xE3A)],
    "latin_ext": [(0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x17F)],
}
SENTENCES = [
    "Café naïve façade résumé — coöperate, jalapeño, Ærøskøbing, Straße, œuvre.",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我能吞下玻璃而不伤身体。机器学习模型的训练需要大量数据。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。東京都の天気は晴れです。",
    "다람쥐 헌 쳇바퀴에 타고파. 한국어 토큰화 테스트입니다.",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق.",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "Ελληνικά, русский, 中文, 日本語, 한국어, العربية, हिन्दी, ไทย — all in one line.",
]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u0085", "\u2000", "\u2003", "\u200a", "\u3000",
          "\u202f", "\u205f", "\u2028", "\u2029", "\v", "\f", " \t ", "\n\n", "\t\t\t", "    "]
EMOJI_BASE = [0x1F600, 0x1F64F]
SKIN = [0x1F3FB, 0x1F3FC, 0x1F3FD, 0x1F3FE, 0x1F3FF]
ZWJ_SEQ = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F469\u200D\U0001F4BB",
           "\U0001F3F3\uFE0F\u200D\U0001F308", "\U0001F441\uFE0F\u200D\U0001F5E8\uFE0F",
           "\U0001F9D1\U0001F3FD\u200D\U0001F91D\u200D\U0001F9D1\U0001F3FB", "\u2764\uFE0F\u200D\U0001F525"]
FLAGS = ["\U0001F1EF\U0001F1F5", "\U0001F1FA\U0001F1F8", "\U0001F1E9\U0001F1EA", "\U0001F1EB\U0001F1F7"]
SPECIALS = ["<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<|end_header_id|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<|reserved_special_token_5|>", "<|fim_prefix|>", "<|vision_pad|>",
            "<|im_end|", "<|im_", "<<|im_end|>>", "<|im_end|><|im_end|>", "|>", "<|", "<|begin_of_text|><|eot_id|>"]
CODE = [
    "def f(x, y=2):\n    return {'a': [x ** y, x // 3]}  # comment\n",
    "for (int i = 0; i < n; ++i) { acc += a[i] * b[i]; }\n",
    "#include <vector>\nstd::vector<int32_t> v{1, 2, 3};\n",
    "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%son';\n",
    "{\"key\": [1, 2.5e-3, null, true], \"nested\": {\"a\": \"b\"}}\n",
    "if [[ -f \"$file\" ]]; then echo \"ok\" >&2; fi\n",
    "x = lambda a: a if a else None\nprint(f\"{x(3)!r:>10}\")\n",
    "\tmov eax, [rbp-0x10]\n\tcall _ZNSt6vectorIiSaIiEE9push_backERKi\n",
    "    // TODO(someone): fix the off-by-one here -->  a[i+1] != a[i-1]\n",
    "<div class=\"x\">&nbsp;&lt;tag&gt;</div>\n",
]


def rand_script(rng, name, n):
    ranges = SCRIPTS[name]
    out = []
    while len(out) < n:
        lo, hi = rng.choice(ranges)
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) != "Cn":
            out.append(c)
    return "".join(out)


def contraction(rng):
    c = rng.choice(CONTRACTIONS)
    c = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in c)
    apo = rng.choice(["'", "'", "'", "\u2019"])
    word = rng.choice(WORDS)
    odd = rng.random()
    if odd < 0.05:
        c = c.replace("s", "\u017f")  # long s: case-folds to s
    elif odd < 0.08:
        c = c.replace("k", "\u212a")
    return word + apo + c


def prose(rng, n_words):
    out = []
    for i in range(n_words):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.1:
            w = w.capitalize()
        elif r < 0.13:
            w = w.upper()
        elif r < 0.2:
            w = contraction(rng)
        out.append(w)
        if rng.random() < 0.1:
            out[-1] += rng.choice([",", ".", ";", ":", "!", "?", "...", " -", "\"", ")"])
    return " ".join(out)


def digits(rng):
    kind = rng.randrange(5)
    if kind == 0:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 200)))
    if kind == 1:
        return f"{rng.randint(0, 10**9):,}.{rng.randint(0, 999):03d}"
    if kind == 2:
        return " ".join(str(rng.randint(0, 10**rng.randint(1, 12))) for _ in range(rng.randint(1, 20)))
    if kind == 3:
        return "v" + ".".join(str(rng.randint(0, 99)) for _ in range(4)) + " ½ ² ٣٤٥ १२३ ๑๒๓ Ⅻ ①"
    return "3.14159265358979323846264338327950288419716939937510" + str(rng.randint(0, 10**30))


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        parts.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 6))))
        if rng.random() < 0.6:
            parts.append(rng.choice(WORDS + ["!", "?", "x", "1", "é", "中"]))
    return "".join(parts)


def emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.3:
            parts.append(chr(rng.randint(*EMOJI_BASE)))
        elif r < 0.55:
            parts.append(rng.choice(["\U0001F44D", "\U0001F44B", "\U0001F64F", "\U0001F9D1", "\u270B"]) + chr(rng.choice(SKIN)))
        elif r < 0.75:
            parts.append(rng.choice(ZWJ_SEQ))
        elif r < 0.85:
            parts.append(rng.choice(FLAGS))
        elif r < 0.92:
            parts.append(rng.choice(["1\uFE0F\u20E3", "#\uFE0F\u20E3", "\u263A\uFE0F", "\u00A9\uFE0E"]))
        else:
            parts.append(rng.choice(WORDS))
        parts.append(rng.choice(["", " ", "  ", "\n"]))
    return "".join(parts)


def combining(rng):
    base = rng.choice(SENTENCES[:3] + ["élan vital", "Ångström über", "ḍḥṣṭẓ", "Việt Nam Tiếng Việt", "한국어 텍스트"])
    form = rng.choice(["NFC", "NFD", "NFKD", "NFKC"])
    s = unicodedata.normalize(form, base)
    if rng.random() < 0.4:  # stacked and reordered marks
        s += " a\u0323\u0301 a\u0301\u0323 q\u0307\u0323 e\u0301\u0301 \u0301lone x\u0338"
    if rng.random() < 0.3:
        s = s.replace(" ", rng.choice(SPECIALS[:4]) + "\u0301 ", 1)
    return s


def multilingual(rng):
    r = rng.random()
    if r < 0.4:
        return rng.choice(SENTENCES)
    if r < 0.8:
        name = rng.choice(list(SCRIPTS))
        return " ".join(rand_script(rng, name, rng.randint(1, 12)) for _ in range(rng.randint(1, 8)))
    return " ".join(rng.choice(SENTENCES).split()[: rng.randint(1, 5)] + [rand_script(rng, rng.choice(list(SCRIPTS)), 5)])


def specials(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(rng.choice(SPECIALS))
        parts.append(rng.choice(["", " ", "  ", "\n", " hello ", "world", "é", "\t", "'s", "123", "\u00a0"]))
    return "".join(parts)


def code(rng):
    return "".join(rng.choice(CODE) for _ in range(rng.randint(1, 4)))


KINDS = [prose, lambda r: prose(r, r.randint(1, 40)), code, digits, whitespace, lambda r: contraction(r) + " " + contraction(r),
         multilingual, emoji, combining, specials]


def one(rng, kind):
    if kind is prose:
        return prose(rng, rng.randint(1, 60))
    return kind(rng)


def long_string(rng, min_chars):
    parts = []
    total = 0
    while total < min_chars:
        s = one(rng, rng.choice(KINDS))
        parts.append(s)
        parts.append(rng.choice([" ", "\n", "", "\t"]))
        total += len(s) + 1
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--count", type=int, default=6000)
    ap.add_argument("--mb", type=float, default=0.0, help="instead of --count: about this many MB of mixed text")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = sys.stdout
    if args.mb > 0:
        target = int(args.mb * 1e6)
        size = 0
        while size < target:
            s = long_string(rng, 2000) if rng.random() < 0.1 else one(rng, rng.choice(KINDS))
            line = json.dumps(s, ensure_ascii=False)
            out.write(line + "\n")
            size += len(s.encode("utf-8"))
        return
    fixed = ["", " ", "a", "\n", "  \n  ", "'s", "'S", "'Re", "'rE", "'LL", "'ve'", "\u00a0", "\u0085", "<|im_end|>",
             " <|im_end|> ", "<|begin_of_text|>Hello", "x<|eot_id|>y", "\u017f", "'\u017f", "\u212a", "\u0301",
             "e\u0301", "\u00e9", "\U0001F44D\U0001F3FD", "1234567890" * 5]
    for s in fixed:
        out.write(json.dumps(s, ensure_ascii=False) + "\n")
    for i in range(args.count - len(fixed)):
        if i % 250 == 0:
            s = long_string(rng, 10000 + rng.randint(0, 5000))
        else:
            s = one(rng, rng.choice(KINDS))
        out.write(json.dumps(s, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

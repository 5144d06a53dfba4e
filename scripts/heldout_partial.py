#!/usr/bin/env python3
"""Build held-out partial-copy sets like ../shared/eval/dev-excerpt-{zh,en}, from articles those dev sets
did not use: a check that a rule tuned on the dev sets holds on other articles.

Usage (from the project's root, beside ../shared):
  scripts/heldout_partial.py [--lang zh|en|both] [--out DIR]   build DIR/heldout-{zh,en}/{stream,truth}.jsonl
  scripts/heldout_partial.py --check DEVDIR --lang zh|en       recompute truth for DEVDIR/stream.jsonl, compare
Score a set as the dev sets are:
  simdedup scan DIR/heldout-zh/stream.jsonl > v.jsonl
  python3 ../shared/eval/score_partial.py DIR/heldout-zh/truth.jsonl v.jsonl

Layout copied from the dev sets: originals b00000.. every 12 min from 2026-01-01T00:00Z (ms), in random order;
copies x00000.. (25-60 % of the source's sentences: prefix / middle run / in-order subset; ~1 in 3 with a new lead:
half a wire-style tag, half the first sentence of another article), kept only if >= 150 Han chars / >= 50 words;
3/4 come 1-40 whole hours after the source, 1/4 1-40 h before it. Sorted by (ts, id).

Truth (matches the dev truth.jsonl exactly, see --check): 5-gram sets -- zh: tokens = single Han chars and
lowercased [a-z0-9]+ runs; en: lowercased [a-z0-9]+ words.  For each article, over the articles EARLIER in the
stream with ts >= own ts - 48 h:  best_j = max Jaccard, best_c = max |own ∩ other| / |own|,
best_prev = argmax containment (ties: higher Jaccard, then most recent).  Candidates come from an inverted index
gram -> earlier articles, so work is O(sum of postings inside the window).
"""
import argparse, collections, json, math, os, random, re, sys

SEED = 20251207
BASE_TS = 1767225600000          # 2026-01-01T00:00:00Z, as in the dev sets
STEP = 12 * 60 * 1000            # originals every 12 min
HOUR = 3600 * 1000
WINDOW = 48 * HOUR
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared')
DATA = os.path.join(SHARED, 'data')
EVAL = os.path.join(SHARED, 'eval')

HAN = re.compile(r'[\u4e00-\u9fff]')
ZH_TOK = re.compile(r'[\u4e00-\u9fff]|[a-z0-9]+')
EN_TOK = re.compile(r'[a-z0-9]+')


def tokens(lang, text):
    return (ZH_TOK if lang == 'zh' else EN_TOK).findall(text.lower())


def grams(lang, text):
    t = tokens(lang, text)
    return {'\x01'.join(t[i:i + 5]) for i in range(len(t) - 4)}


def long_enough(lang, text):
    if lang == 'zh':
        return len(HAN.findall(text)) >= 150
    return len(EN_TOK.findall(text.lower())) >= 50


def compute_truth(lang, stream):
    """stream: list of dicts with id, text, ts, already in arrival order. Returns list of (best_prev, best_j, best_c)."""
    inv = collections.defaultdict(list)      # gram -> [article index, ...] (append order = arrival order)
    G, res = [], []
    for k, s in enumerate(stream):
        g = grams(lang, s['text']); G.append(g)
        lo = s['ts'] - WINDOW
        cnt = collections.Counter()
        for x in g:
            post = inv.get(x)
            if post:
                for j in reversed(post):       # newest first; stop once outside the window
                    if stream[j]['ts'] < lo:
                        break
                    cnt[j] += 1
        bj = bc = 0.0; bp = None; key = None
        for j, c in cnt.items():
            jac = c / (len(g) + len(G[j]) - c)
            con = c / len(g)
            bj = max(bj, jac)
            kk = (con, jac, j)
            if key is None or kk > key:
                key = kk; bp = j
            bc = max(bc, con)
        for x in g:
            inv[x].append(k)
        res.append((stream[bp]['id'] if bp is not None else None, round(bj, 3), round(bc, 3)))
    return res


# ---------------------------------------------------------------- sentence splitting
ZH_SENT = re.compile(r'.*?(?:[。！？!?]+[”’"」』）)]*|$)', re.S)
EN_SENT = re.compile(r'(?:(?<=[.!?])|(?<=[.!?]["\']))\s+(?=["\'(]?[A-Z0-9])')


def sentences(lang, text):
    """-> list of (paragraph_no, sentence) with no empty sentences."""
    out = []
    for p, para in enumerate(re.split(r'\n\s*\n|\n', text)):
        para = para.strip()
        if not para:
            continue
        parts = ZH_SENT.findall(para) if lang == 'zh' else EN_SENT.split(para)
        for s in parts:
            s = s.strip()
            if s:
                out.append((p, s))
    return out


def join(lang, sents):
    if lang == 'en':
        return ' '.join(s for _, s in sents)
    buf, prev = [], None
    for p, s in sents:
        if buf and p != prev:
            buf.append('\n\n')
        buf.append(s); prev = p
    return ''.join(buf)


LEADS = {
    'zh': ['（来源：央视网）', '据新华社报道，', '转载自央视新闻客户端。', '（来源：人民网）', '据央视新闻消息，', '本文转自新华网。'],
    'en': ['(Reuters) - ', 'UPDATE 1 - ', 'From our wire service: ', 'LONDON (AP) - ', 'Updated: ', 'EXCLUSIVE - '],
}


def make_copy(lang, rng, src_text, other_texts):
    S = sentences(lang, src_text)
    n = len(S)
    lo, hi = math.ceil(0.25 * n), math.floor(0.60 * n)
    if n < 4 or hi < lo or hi < 1:
        return None
    kind = rng.choice(['excerpt-prefix', 'excerpt-middle', 'excerpt-subset'])
    k = rng.randint(max(1, lo), hi)
    if kind == 'excerpt-prefix':
        pick = list(range(k))
    elif kind == 'excerpt-middle':
        st = rng.randint(1, n - k)
        pick = list(range(st, st + k))
    else:
        pick = sorted(rng.sample(range(n), k))
    body = join(lang, [S[i] for i in pick])
    r = rng.random()
    if r < 1 / 6:                                      # wire-style tag
        body = rng.choice(LEADS[lang]) + body
    elif r < 1 / 3:                                    # lead sentence from another article
        other = sentences(lang, rng.choice(other_texts))
        lead = next((s for _, s in other if (len(HAN.findall(s)) >= 15 if lang == 'zh' else len(s.split()) >= 8)),
                    other[0][1] if other else '')
        body = lead + ('\n\n' if lang == 'zh' else ' ') + body
    if not long_enough(lang, body):
        return None
    return kind, body


# ---------------------------------------------------------------- pools
def load(path):
    return [json.loads(l) for l in open(path, encoding='utf-8')]


def pool(lang):
    if lang == 'zh':
        C = load(f'{DATA}/cctv-news-2022-2025.jsonl')
        used = {s['text'] for s in load(f'{EVAL}/dev-excerpt-zh/stream.jsonl') if s['id'][0] == 'b'}
        dev_ids = {s['id'] for s in load(f'{EVAL}/dev-zh/stream.jsonl')}
        # index >= 12000, >= 600 chars (the dev set's floor), used by neither dev-excerpt-zh nor dev-zh
        P = [C[i]['text'] for i in range(12000, len(C))
             if len(C[i]['text']) >= 600 and C[i]['text'] not in used and C[i]['id'] not in dev_ids]
    else:
        C = load(f'{DATA}/bbc-news.jsonl')
        used = {s['text'] for s in load(f'{EVAL}/dev-excerpt-en/stream.jsonl') if s['id'][0] == 'b'}
        # every article dev-excerpt-en did not use (the dev set's own 1500-char floor would leave only 334)
        P = [c['text'] for c in C if c['text'] not in used and len(c['text']) >= 600 and long_enough('en', c['text'])]
    return P


def build(lang, outdir):
    rng = random.Random(f'{SEED}-{lang}')
    P = pool(lang)
    n_src = min(1200, len(P))
    src = rng.sample(P, n_src)
    n_copy = round(400 * n_src / 1200)
    stream, truth_meta = [], {}
    for i, t in enumerate(src):
        bid = 'b%05d' % i
        stream.append({'id': bid, 'text': t, 'ts': BASE_TS + i * STEP})
        truth_meta[bid] = ('orig', None)
    origins = rng.sample(range(n_src), n_copy)
    dropped = 0
    for x, oi in enumerate(origins):
        others = [src[j] for j in rng.sample(range(n_src), 3) if j != oi]
        c = None
        for _ in range(4):
            c = make_copy(lang, rng, src[oi], others)
            if c:
                break
        if not c:
            dropped += 1
            continue
        kind, body = c
        h = rng.randint(1, 40)
        sign = -1 if rng.random() < 0.25 else 1
        xid = 'x%05d' % x
        stream.append({'id': xid, 'text': body, 'ts': BASE_TS + oi * STEP + sign * h * HOUR})
        truth_meta[xid] = (kind, 'b%05d' % oi)
    stream.sort(key=lambda s: (s['ts'], s['id']))
    T = compute_truth(lang, stream)
    os.makedirs(outdir, exist_ok=True)
    with open(f'{outdir}/stream.jsonl', 'w', encoding='utf-8') as f:
        for s in stream:
            f.write(json.dumps({'id': s['id'], 'text': s['text'], 'ts': s['ts']}, ensure_ascii=False) + '\n')
    with open(f'{outdir}/truth.jsonl', 'w', encoding='utf-8') as f:
        for s, (bp, bj, bc) in zip(stream, T):
            kind, origin = truth_meta[s['id']]
            f.write(json.dumps({'id': s['id'], 'kind': kind, 'origin': origin, 'best_prev': bp, 'best_j': bj,
                                'best_c': bc, 'long_enough': long_enough(lang, s['text'])}, ensure_ascii=False) + '\n')
    kinds = collections.Counter(truth_meta[s['id']][0] for s in stream)
    strong = sum(1 for s, t in zip(stream, T) if t[2] >= 0.8 and long_enough(lang, s['text']))
    print(f'{lang}: pool {len(P)}, sources {n_src}, copies {n_copy - dropped} (dropped {dropped}), {dict(kinds)}, '
          f'strong {strong} -> {outdir}', file=sys.stderr)


def check(lang, devdir):
    stream = load(f'{devdir}/stream.jsonl')
    truth = {t['id']: t for t in load(f'{devdir}/truth.jsonl')}
    T = compute_truth(lang, stream)
    n = len(stream)
    dj = [abs(bj - truth[s['id']]['best_j']) for s, (_, bj, _) in zip(stream, T)]
    dc = [abs(bc - truth[s['id']]['best_c']) for s, (_, _, bc) in zip(stream, T)]
    le = sum(long_enough(lang, s['text']) == truth[s['id']]['long_enough'] for s in stream)
    bp = sum(p == truth[s['id']]['best_prev'] for s, (p, _, _) in zip(stream, T))
    st = sum((bc >= 0.8) == (truth[s['id']]['best_c'] >= 0.8) for s, (_, _, bc) in zip(stream, T))
    print(f'{devdir}: n={n} best_j equal {sum(d < 5e-4 for d in dj)} (max |diff| {max(dj):.3f}), '
          f'best_c equal {sum(d < 5e-4 for d in dc)} (max |diff| {max(dc):.3f}), long_enough equal {le}, '
          f'strong (best_c>=0.8) equal {st}, best_prev equal {bp} (others are containment ties)')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--lang', default='both')
    ap.add_argument('--out', default='target/heldout')
    ap.add_argument('--check')
    a = ap.parse_args()
    if a.check:
        check(a.lang, a.check)
    else:
        for lang in (['zh', 'en'] if a.lang == 'both' else [a.lang]):
            build(lang, f'{a.out}/heldout-{lang}')

import json, threading, random, weakref, gc
from otel_agentguard._plain_check import text_form
from otel_agentguard.fingerprint import _Canonicalizer
raws = ['{"k%d":1,"a":2,"z":[1,"2"]}' % i for i in range(20)]
errors = []
def worker(seed):
    rng = random.Random(seed)
    for _ in range(30000):
        i = rng.randrange(20)
        noise = frozenset({"k%d" % rng.randrange(20)}) if rng.random() < 0.5 else frozenset({"k%d" % i})
        got = text_form(raws[i], noise, 256)
        exp = "k%d" % i in noise
        if exp and got is not None: errors.append((raws[i], noise, got))
        if not exp and got is None: errors.append(("refused", raws[i], noise))
ts = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
import sys; sys.setswitchinterval(1e-6)
[t.start() for t in ts]; [t.join() for t in ts]
print("errors", len(errors), errors[:3])

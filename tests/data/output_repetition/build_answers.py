"""Builds answers.jsonl: the labelled set for the output_repetition probe.

Run ``python tests/data/output_repetition/build_answers.py`` to rebuild it; the
output is deterministic. Each line: ``id``, ``label`` (``chanting`` or
``honest``), ``kind``, ``text`` and, for chanting answers, ``onset``: the
character offset where the text starts repeating what came before (the start
of the repeated unit's second copy).

Honest answers are long and repeat themselves the way good answers do:
tables with repeated cells, checklists and instructions with parallel wording,
poems and songs with refrains, code with repeated structure, Chinese answers,
FAQs, inventories whose items differ only by a number. Chanting answers start as an honest answer and then loop: one sentence,
a paragraph, a sentence with a counter that changes, Chinese with and without
punctuation, a code line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
rng = random.Random(20261201)

# --- honest material ---------------------------------------------------------------------------

TOPICS = [
    ("PostgreSQL", "database"), ("Redis", "cache"), ("Kafka", "message broker"), ("Nginx", "web server"),
    ("Kubernetes", "orchestrator"), ("Terraform", "provisioning tool"), ("Grafana", "dashboard tool"),
    ("Prometheus", "metrics store"), ("Elasticsearch", "search engine"), ("RabbitMQ", "queue"),
]
FEATURES = ["Replication", "Backups", "Encryption at rest", "Access control", "Metrics export", "Hot reload",
            "Horizontal scaling", "Audit log", "Snapshots", "Rate limiting", "Health checks", "TLS"]
MARKS = ["Yes", "No", "Yes", "Partial", "Yes", "No"]

INTRO = [
    "Here is a comparison of the options you asked about, followed by a short recommendation.",
    "Below is a summary of what each option supports today, based on the current documentation.",
    "I put the details in a table so the differences are easier to see at a glance.",
    "The short answer is that it depends on your workload; the table below shows the trade-offs.",
]
OUTRO = [
    "If you mostly read and rarely write, the first option is the simpler choice. If writes dominate, "
    "test the second option under your real load before you decide, because the numbers above come from "
    "small benchmarks and your mileage will vary.",
    "None of these is wrong. Pick the one your team already knows how to run, and revisit the decision "
    "when the load or the team changes. Operational familiarity usually matters more than a feature checkbox.",
    "Before migrating, take a full backup, run the new setup in parallel for a week, and compare the error "
    "rates and latency percentiles side by side. Only then switch the traffic over.",
]
PROSE = [
    "A good monitoring setup starts with the questions you need to answer during an incident. Write those "
    "questions down first. Then decide which signals answer them: metrics for rates and latencies, logs for "
    "the details of a single failure, traces for the path a request took. Resist the urge to collect "
    "everything, because storage is cheap but attention is not.",
    "Caching helps only when the same data is read many times before it changes. Measure the hit rate "
    "before and after you add a cache. A cache with a low hit rate adds latency, memory pressure and a new "
    "way for stale data to reach users, and it gives little in return.",
    "When you size a connection pool, start from the database side. Each connection costs memory on the "
    "server, and past a point more connections make every query slower. A small pool with a short queue "
    "often beats a large pool, because the database spends its time working instead of switching.",
    "Schema migrations are safest when they are backwards compatible. Add the new column, deploy code that "
    "writes both, backfill, switch the reads, and only then drop the old column. Each step can be rolled "
    "back on its own, which is the whole point.",
    "Retries are useful for transient failures and harmful for everything else. Use exponential backoff "
    "with jitter, cap the number of attempts, and make sure the operation is idempotent. Without those, "
    "retries turn a small outage into a large one.",
    "Rate limits protect a service from its own clients. Choose the limit from the capacity you measured, "
    "not from a guess, and return a clear error with a retry-after header so well-behaved clients slow "
    "down instead of hammering the endpoint.",
    "Log levels only help if the team agrees on what they mean. Errors should be things someone must act "
    "on. Warnings are things that might need action if they keep happening. Everything else is info or "
    "debug, and debug should be off in production unless you are chasing a specific problem.",
    "Feature flags let you ship code before you ship behaviour. Keep each flag short-lived, give it an "
    "owner and an expiry date, and delete it once the feature is fully on. Old flags pile up and make "
    "every code path harder to reason about.",
]
CHINESE_PROSE = [
    "数据库备份需要定期检查。首先，确认备份任务每天都按时完成；其次，每个月至少做一次恢复演练；最后，"
    "把备份文件保存在与生产环境不同的区域。只有真正恢复过的备份，才是可以信赖的备份。",
    "部署新版本之前，请先在预发布环境中完成测试。测试通过以后，再按照百分之十、百分之五十、百分之百的"
    "比例逐步放量。每一步都要观察错误率和延迟，如果指标异常，就立即回滚。",
    "缓存可以减轻数据库的压力，但也会带来数据不一致的问题。设置合理的过期时间，写入数据时主动删除缓存，"
    "并且监控命中率。命中率太低的缓存，往往弊大于利。",
    "排查线上问题时，先看监控，再看日志，最后看代码。先确定问题影响的范围和开始的时间，然后寻找同一时间"
    "发生的变更，例如发布、配置修改或者流量变化。大多数故障都和最近的变更有关。",
]


def prose(min_chars: int) -> str:
    paragraphs = rng.sample(PROSE, len(PROSE))
    out = []
    while sum(len(p) + 2 for p in out) < min_chars:
        out.append(paragraphs[len(out) % len(paragraphs)])
        if len(out) >= len(paragraphs):
            break
    return "\n\n".join(out) + "\n\n"


def table_answer() -> str:
    names = rng.sample(TOPICS, 3)
    features = rng.sample(FEATURES, rng.randint(8, 12))
    lines = [rng.choice(INTRO), "", "| Feature | " + " | ".join(n for n, _ in names) + " |",
             "|---|" + "---|" * len(names)]
    for feature in features:
        lines.append(f"| {feature} | " + " | ".join(rng.choice(MARKS) for _ in names) + " |")
    lines += ["", "And the measured numbers from our last load test:", "",
              "| Metric | " + " | ".join(n for n, _ in names) + " |", "|---|" + "---|" * len(names)]
    for metric, unit in (("p50 latency", "ms"), ("p99 latency", "ms"), ("Throughput", "req/s"), ("Memory", "MiB"),
                         ("CPU", "%"), ("Startup time", "s")):
        lines.append(f"| {metric} | " + " | ".join(f"{rng.randint(1, 900)} {unit}" for _ in names) + " |")
    lines += ["", rng.choice(OUTRO)]
    return "\n".join(lines)


CHECK_ITEMS = [
    "Confirm the backup of the {x} finished without errors",
    "Check that the {x} has enough free disk space",
    "Verify the TLS certificate of the {x} is valid for at least 30 days",
    "Make sure the {x} runs the patched version",
    "Review the alert thresholds for the {x}",
    "Check the replication lag of the {x}",
    "Confirm the on-call rotation covers the {x}",
    "Verify the {x} restarts cleanly after a reboot",
    "Check the error rate of the {x} over the last 24 hours",
    "Confirm the access list of the {x} has no former employees",
]


def checklist_answer() -> str:
    systems = rng.sample([f"{name} {kind}" for name, kind in TOPICS], 3)
    lines = ["Here is the pre-release checklist. Tick each item when it is done.", ""]
    for system in systems:
        lines.append(f"### {system}")
        lines.append("")
        for item in rng.sample(CHECK_ITEMS, rng.randint(5, 8)):
            lines.append(f"- [ ] {item.format(x=system)}")
        lines.append("")
    lines.append("When every box is ticked, post the checklist in the release channel and tag the release "
                 "manager. If an item cannot be done, write down why and who accepted the risk.")
    return "\n".join(lines)


STANZAS = [
    ["The river runs beneath the hill,", "The mill wheel turns, the night is still,",
     "And every stone remembers rain", "That fell before and falls again."],
    ["The lantern swings above the door,", "The dog is sleeping on the floor,",
     "The kettle hums a quiet tune", "Beneath the pale and patient moon."],
    ["My father planted rows of pine,", "He measured every crooked line,",
     "He never saw the forest grow", "But left the seeds for us to sow."],
    ["The harbour lights go on at five,", "The fishing boats come back alive,",
     "With salt and silver in their nets", "And not a single one regrets."],
    ["We walked the road from town to town,", "Our boots were worn, our coats were brown,",
     "We sang to keep the cold away", "And slept in barns of golden hay."],
    ["The snow came early that December,", "The kind of cold that you remember,",
     "We gathered wood and told old stories", "Of summer days and faded glories."],
    ["A letter came from far away,", "It took a month to come, they say,",
     "The ink had run, the words were few,", "But every single word was true."],
]
REFRAINS = [
    ["And still the water finds its way home."],
    ["Sing low, sing slow, the night is long,", "And we will carry on the song."],
    ["Come back, come back, the fire is warm."],
    ["Hold on, hold on, the morning comes."],
]


def poem_answer() -> str:
    refrain = rng.choice(REFRAINS)
    stanzas = rng.sample(STANZAS, rng.randint(4, 6))
    title = rng.choice(["The Mill", "Homecoming", "Winter Road", "Harbour", "Letters"])
    parts = [f"Here is a poem with a refrain, as you asked.\n\n**{title}**\n"]
    for stanza in stanzas:
        parts.append("\n".join(stanza) + "\n" + "\n".join(f"*{line}*" for line in refrain) + "\n")
    parts.append("The refrain comes back after every stanza on purpose: it is the thread that ties the "
                 "images together, and each return should feel slightly different because of what came before.")
    return "\n".join(parts)


def song_answer() -> str:
    chorus = rng.choice(REFRAINS) + ["Oh, the road goes on and on,", "And we walk until the dawn."]
    verses = rng.sample(STANZAS, 3)
    parts = ["Here are the lyrics, with the chorus after each verse.\n"]
    for number, verse in enumerate(verses, 1):
        parts.append(f"[Verse {number}]\n" + "\n".join(verse) + "\n")
        parts.append("[Chorus]\n" + "\n".join(chorus) + "\n")
    parts.append("[Outro]\n" + "\n".join(chorus[:2]) + "\n")
    return "\n".join(parts)


STEP_ACTIONS = [
    ("Open the **Settings** page and select **{x}**.", "Click **Save**."),
    ("In the left menu, choose **{x}**, then **Edit**.", "Click **Save**."),
    ("Scroll to the **{x}** section and expand it.", "Click **Next**."),
    ("Enter the value for **{x}** in the text box.", "Click **Next**."),
    ("Select the **{x}** checkbox if it is not selected yet.", "Click **Apply**."),
    ("Copy the **{x}** token from the dialog and keep it somewhere safe.", "Click **Done**."),
]
FIELDS = ["Notifications", "Billing address", "API keys", "Webhooks", "Team members", "Single sign-on",
          "Data retention", "Time zone", "Two-factor authentication", "Export format"]


def steps_answer() -> str:
    fields = rng.sample(FIELDS, rng.randint(6, 9))
    lines = ["Follow these steps in order. Each step ends with the same button so you can check your progress.", ""]
    for number, field in enumerate(fields, 1):
        action, button = rng.choice(STEP_ACTIONS)
        lines.append(f"{number}. {action.format(x=field)} Wait until the page confirms the change. {button}")
    lines += ["", "Repeat the same steps for every workspace you manage. If a step fails, reload the page and "
              "start again from that step: the earlier steps are already saved.", "", prose(400)]
    return "\n".join(lines)


CODE_BLOCKS = [
    '''```python
import pytest


def test_parse_empty():
    result = parse("")
    assert result == []


def test_parse_one():
    result = parse("a")
    assert result == ["a"]


def test_parse_two():
    result = parse("a,b")
    assert result == ["a", "b"]


def test_parse_spaces():
    result = parse(" a , b ")
    assert result == ["a", "b"]


def test_parse_quoted():
    result = parse('"a,b",c')
    assert result == ["a,b", "c"]
```''',
    '''```python
DEFAULTS = {
    "timeout": 30,
    "retries": 3,
    "backoff": 1.5,
    "max_connections": 100,
    "keepalive": True,
    "verify_tls": True,
    "user_agent": "client/1.0",
}


def config(overrides):
    merged = dict(DEFAULTS)
    for key, value in overrides.items():
        if key not in DEFAULTS:
            raise KeyError(key)
        merged[key] = value
    return merged
```''',
    '''```javascript
function statusText(code) {
  switch (code) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 500:
      return "Internal Server Error";
    default:
      return "Unknown";
  }
}
```''',
    '''```go
func TestAdd(t *testing.T) {
	if got := Add(1, 2); got != 3 {
		t.Errorf("Add(1, 2) = %d, want 3", got)
	}
	if got := Add(0, 0); got != 0 {
		t.Errorf("Add(0, 0) = %d, want 0", got)
	}
	if got := Add(-1, 1); got != 0 {
		t.Errorf("Add(-1, 1) = %d, want 0", got)
	}
	if got := Add(100, 200); got != 300 {
		t.Errorf("Add(100, 200) = %d, want 300", got)
	}
}
```''',
    '''```sql
CREATE TABLE orders (
    id BIGSERIAL PRIMARY KEY,
    customer_id BIGINT NOT NULL REFERENCES customers(id),
    status TEXT NOT NULL DEFAULT 'new',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX orders_customer_idx ON orders (customer_id);
CREATE INDEX orders_status_idx ON orders (status);
CREATE INDEX orders_created_idx ON orders (created_at);
```''',
]


def code_answer() -> str:
    blocks = rng.sample(CODE_BLOCKS, 2)
    return ("Here is an implementation and its tests. The tests follow one pattern on purpose, so a failing "
            "case is easy to read.\n\n" + blocks[0] + "\n\nAnd a second piece you will need:\n\n" + blocks[1]
            + "\n\n" + rng.choice(OUTRO))


def chinese_answer() -> str:
    paragraphs = rng.sample(CHINESE_PROSE, len(CHINESE_PROSE))
    items = ["检查备份任务是否成功", "检查磁盘空间是否充足", "检查证书是否即将过期", "检查告警是否正常发送",
             "检查值班表是否已经更新", "检查日志是否有异常"]
    listing = "\n".join(f"{i}. {item}。" for i, item in enumerate(rng.sample(items, 5), 1))
    return "以下是具体建议：\n\n" + "\n\n".join(paragraphs[:3]) + "\n\n发布前请逐项确认：\n\n" + listing + \
        "\n\n" + paragraphs[3]


FAQ = [
    ("How do I reset my password?", "Open the sign-in page, choose **Forgot password**, and follow the link we email you. The link is valid for one hour."),
    ("How do I change my email address?", "Open **Settings**, then **Account**, and enter the new address. We send a confirmation link to the new address."),
    ("How do I delete my account?", "Open **Settings**, then **Account**, and choose **Delete account**. We keep your data for 30 days in case you change your mind."),
    ("How do I export my data?", "Open **Settings**, then **Privacy**, and choose **Export**. The export is ready within 24 hours and we email you a link."),
    ("How do I add a team member?", "Open **Settings**, then **Team**, and choose **Invite**. The invitation is valid for 7 days."),
    ("How do I cancel my subscription?", "Open **Settings**, then **Billing**, and choose **Cancel**. You keep access until the end of the billing period."),
    ("How do I contact support?", "Write to support from the help menu. We answer within one business day."),
]


def faq_answer() -> str:
    chosen = rng.sample(FAQ, 6)
    parts = ["Here are the answers to the most common questions.\n"]
    for question, answer in chosen:
        parts.append(f"**{question}**\n\n{answer} If this does not work, contact support and include your account id.\n")
    return "\n".join(parts) + "\n" + prose(300)


def inventory_answer() -> str:
    """An enumeration whose items differ only by a number: honest, and the hardest case for counters."""
    service = rng.choice(["api", "worker", "web", "cache"])
    lines = [f"I checked every {service} pod in the cluster. All of them answer their health check:", ""]
    for n in range(1, rng.randint(15, 30)):
        lines.append(f"- {service}-{n}: healthy")
    lines += ["", "And the restart counts over the last week:", ""]
    for n in range(1, rng.randint(10, 20)):
        lines.append(f"{n}. Pod {service}-{n} restarted {rng.randint(0, 3)} times, last on day {rng.randint(1, 7)}.")
    lines += ["", rng.choice(OUTRO)]
    return "\n".join(lines)


HONEST = [("table", table_answer, 7), ("inventory", inventory_answer, 3), ("checklist", checklist_answer, 7), ("poem", poem_answer, 7),
          ("song", song_answer, 3), ("steps", steps_answer, 8), ("code", code_answer, 6),
          ("chinese", chinese_answer, 5), ("faq", faq_answer, 4)]

# --- chanting -----------------------------------------------------------------------------------

SENTENCES = [
    "I will now check the configuration again to make sure everything is correct. ",
    "Let me verify the result one more time. ",
    "The answer is that the server needs to be restarted before the change takes effect. ",
    "Please note that this may take a few minutes to complete. ",
    "I apologize for the confusion, let me try again. ",
    "Therefore, the best option is to use the default settings. ",
    "This is the final answer. ",
    "To summarize, you should check the logs, restart the service and check the logs again. ",
    "Wait, I need to double-check this calculation before I continue. ",
    "Hmm, that does not look right, so let me look at it again. ",
]
PARAGRAPHS = [
    "First, open the dashboard. Then select the service that is failing. Look at the error rate over the "
    "last hour. If it is above one percent, restart the service.\n\n",
    "The root cause is a misconfigured timeout. The client gives up after five seconds. The server needs "
    "ten seconds under load. Increase the client timeout to fifteen seconds.\n\n",
    "In conclusion, the migration is safe to run. We tested it on a copy of production. It took twelve "
    "minutes. No data was lost and the application kept working.\n\n",
    "Let me reconsider the problem. The function returns None when the list is empty. The caller does "
    "not check for None. So the program crashes on the next line.\n\n",
    "I checked the file again. It contains the same configuration as before. The setting is still "
    "missing. I will check the file again.\n\n",
]
COUNTERS = [
    "Attempt {n}: checking whether the deployment finished. ",
    "Step {n}: verify that the configuration file is valid.\n",
    "Retry #{n} - connecting to the database server again.\n",
    "- Item {n}: the same value as the previous item.\n",
    "Iteration {n} of the loop: the result is still zero. ",
    "Page {n} of the report shows no new results. ",
    "{n}. Check the logs for errors and try again.\n",
    "Round {n}: the test failed with the same error as before. ",
    "Day {n}: nothing changed since yesterday. ",
    "Checking server {n} of 40: status unknown, moving on. ",
]
CHINESE_CHANTS = [
    "我需要再检查一遍配置文件。",
    "让我们重新考虑这个问题。",
    "这个问题的答案是需要重启服务器。",
    "请稍等，我正在处理您的请求。",
    "因此最好的办法是使用默认设置。",
]
CHINESE_RUNS = [
    "我们需要再检查一下这个问题的原因",
    "然后再次确认数据是否正确",
    "继续重复同样的步骤直到完成",
    "这个结果还是和之前一样没有变化",
    "我再想一想应该怎么回答这个问题",
]
CODE_LOOPS = [
    ("```python\ndef wait_for_service():\n    while True:\n", "        print(\"waiting for the service to start\")\n"),
    ("```python\nresults = []\n", "results.append(compute(data))\n"),
    ("```javascript\nconst items = [];\n", "items.push(createItem(\"default\"));\n"),
    ("```bash\n#!/bin/sh\nset -e\n", "kubectl rollout restart deployment/api\n"),
    ("```sql\nBEGIN;\n", "UPDATE accounts SET balance = balance WHERE id = 1;\n"),
    ("```python\nimport os\n", "os.makedirs(\"output\", exist_ok=True)\n"),
    ("```go\nfunc main() {\n", "\tfmt.Println(\"retrying connection to the server\")\n"),
    ("```python\nclass Config:\n", "    timeout = 30  # seconds before the request is abandoned\n"),
    ("```yaml\nservices:\n", "  - name: api\n    image: example/api:latest\n"),
    ("```rust\nfn main() {\n", "    println!(\"checking the value once more\");\n"),
]


def honest_prefix() -> str:
    kind, make, _ = rng.choice(HONEST[:3] + HONEST[4:6] + HONEST[7:])
    text = make()
    if len(text) < 1200:
        text += "\n\n" + prose(1200)
    cut = rng.randint(1000, min(len(text), 3000))
    line_end = text.find("\n", cut)
    return (text[:line_end] if line_end > 0 else text).rstrip() + "\n\n"


def chant(prefix: str, unit: str, copies: int) -> tuple[str, int]:
    body = [unit.replace("{n}", str(n)) for n in range(1, copies + 1)]
    return prefix + "".join(body), len(prefix) + len(body[0])


def build() -> list[dict[str, object]]:
    answers: list[dict[str, object]] = []
    for kind, make, count in HONEST:
        for index in range(count):
            text = make()
            if len(text) < 1000 and kind != "chinese":  # a long answer: short ones get an explanation first
                text = prose(600) + text
            answers.append({"id": f"honest-{kind}-{index}", "label": "honest", "kind": kind, "text": text})
    makers = [
        ("sentence", lambda i: chant(honest_prefix(), SENTENCES[i], rng.randint(30, 80))),
        ("paragraph", lambda i: chant(honest_prefix(), PARAGRAPHS[i % len(PARAGRAPHS)], rng.randint(5, 10))),
        ("counter", lambda i: chant(honest_prefix(), COUNTERS[i], rng.randint(30, 60))),
        ("chinese", lambda i: chant(chinese_answer() + "\n\n",
                                    CHINESE_CHANTS[i // 2] if i % 2 == 0 else CHINESE_RUNS[i // 2], rng.randint(30, 80))),
        ("code", lambda i: _code_chant(i)),
    ]
    for kind, make in makers:
        for index in range(10):
            text, onset = make(index)
            answers.append({"id": f"chanting-{kind}-{index}", "label": "chanting", "kind": kind, "text": text,
                            "onset": onset})
    return answers


def _code_chant(index: int) -> tuple[str, int]:
    head, line = CODE_LOOPS[index]
    prefix = honest_prefix() + "Here is the code:\n\n" + head
    return chant(prefix, line, rng.randint(40, 120))


if __name__ == "__main__":
    rows = build()
    with open(HERE / "answers.jsonl", "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} answers: {sum(r['label'] == 'chanting' for r in rows)} chanting")

"""Writes the sample corpus of the README's quickstart into `samples/docs/`.

    .venv/bin/python samples/build.py [--out DIR] [--skip-legacy] [--skip-screenshot]

The corpus is an engineering-wiki export of a fictional company, "Northwind Platform":
one small document per supported format, built with the same libraries the test
fixtures use (python-docx, openpyxl, python-pptx, pymupdf), two legacy binaries made by
a LibreOffice headless round trip, a real draw.io diagram (a threat model from draw.io's
public examples, copied unchanged from `samples/third_party/`, where its licence is), a
screenshot of an error dialog (a small HTML page below, taken with headless Chromium),
and one intentionally truncated PDF so that a run shows a failure (`CORRUPT`) next to
the documents that ingest.

Deterministic: the content is fixed, and so are the timestamps in the document
properties. The OOXML packages are repacked with a fixed zip entry time and a fixed
`dcterms:modified` (openpyxl stamps the save time there), and pymupdf writes no new
file id, so the DOCX, XLSX, PPTX and PDF bytes repeat from run to run with the same
library versions. The legacy `.doc`/`.xls` carry whatever LibreOffice writes (its own
save time, ids), so their bytes differ from run to run; they are committed, and a
machine without `soffice` keeps the committed ones (the build says so). The screenshot's
pixels depend on Chromium's version and fonts: likewise committed, and kept on a
machine without Chromium.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pptx
import pymupdf
from docx.enum.text import WD_ALIGN_PARAGRAPH
from docx.shared import Pt
from openpyxl.styles import Font, PatternFill
from pptx.util import Inches
from pptx.util import Pt as PptPt

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "docs"

AUTHOR = "Northwind Platform Team"
CREATED = datetime(2024, 3, 4, 9, 30, 0)
MODIFIED = datetime(2024, 3, 14, 16, 45, 0)
ZIP_TIME = (2024, 3, 14, 16, 45, 0)
LEGACY_CREATED = datetime(2019, 1, 15, 10, 0, 0)

_PYMUPDF: Any = pymupdf  # pymupdf's constructors are untyped


# --------------------------------------------------------------------------- helpers


def _repack_ooxml(data: bytes) -> bytes:
    """The package with every zip entry dated `ZIP_TIME` and `dcterms:modified` set to
    `MODIFIED`, so the same content gives the same bytes."""
    stamp = MODIFIED.strftime("%Y-%m-%dT%H:%M:%SZ")
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for item in source.infolist():
            body = source.read(item.filename)
            if item.filename == "docProps/core.xml":
                body = re.sub(
                    rb"(<dcterms:modified[^>]*>)[^<]*(</dcterms:modified>)",
                    rb"\g<1>" + stamp.encode() + rb"\g<2>",
                    body,
                )
            info = zipfile.ZipInfo(item.filename, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            target.writestr(info, body)
    return out.getvalue()


def _save(save: Callable[[io.BytesIO], None]) -> bytes:
    buffer = io.BytesIO()
    save(buffer)
    return _repack_ooxml(buffer.getvalue())


# --------------------------------------------------------------------------- Markdown

ONBOARDING_MD = """\
---
title: Engineering Onboarding Guide
author: Priya Raman
created: 2024-03-04
updated: 2024-03-14
labels: [onboarding, handbook, platform]
space: PLAT
---

# Engineering Onboarding Guide

Welcome to the Northwind Platform team. This guide walks you through your first two
weeks: the accounts you need, how to build and run the platform on your laptop, how
code reaches production, and who to ask when you are stuck. It is a living document;
if something here is wrong or out of date, fix it in the same pull request that taught
you otherwise.

The platform team owns the shared services that every Northwind product runs on: the
order API gateway, the event bus, the inventory service, the billing pipeline and the
internal developer tooling around them. We are twenty-three engineers in three time
zones, organised in four squads (Gateway, Data, Billing and Developer Experience) and
one on-call rota that everybody joins after their first month.

## Your first week

Your manager and your onboarding buddy plan the first week with you. Expect fewer
meetings than you fear and more reading than you hope. By Friday you should have
shipped one small change to production, even if it is only a typo in a runbook.

### Day one checklist

- Collect your laptop from the IT desk and enrol it in device management.
- Sign in to the single sign-on portal and set up a hardware security key.
- Request the `platform-engineers` group in the access portal; approval takes a day.
- Join the chat channels `#platform`, `#platform-oncall` and `#deploys`.
- Read the incident response process in the handbook before you touch production.

### Accounts and access

Access follows the principle of least privilege. Read access to source code, the wiki
and the dashboards comes with your group membership. Write access to production
infrastructure is granted per service after your first on-call shadow shift, and it
expires after ninety days unless your squad lead renews it. Nobody, including the
CTO, has standing administrator access to the production databases: break-glass
credentials live in the vault and every use of them pages the security team.

1. Open the access portal and choose **Request group membership**.
2. Ask for `platform-engineers` and, if your squad needs it, `billing-readonly`.
3. Paste the link to your onboarding ticket into the justification field.
4. Wait for your squad lead to approve; you will get an email when it is done.

## Building the platform locally

All services live in one monorepo. The build uses Bazel for the Go and Java services
and uv for the Python tooling. A full build from a cold cache takes about twenty
minutes on a current laptop; incremental builds take seconds. Docker Compose starts
the dependencies (PostgreSQL, Redis, the event bus and a fake payment provider) so that
you can run any service against realistic neighbours without touching shared
environments.

```bash
git clone git@git.northwind.internal:platform/monorepo.git
cd monorepo
./tools/bootstrap.sh            # installs bazelisk, uv and the pre-commit hooks
docker compose -f dev/compose.yaml up -d
bazel test //services/inventory/...
bazel run //services/inventory:server -- --config=dev/inventory.yaml
```

If the bootstrap script fails, run it again with `--verbose` and post the output in
`#platform`. The most common causes are an old Docker Desktop, a VPN that blocks the
internal package mirror, and a shell that does not load `~/.local/bin` into `PATH`.

## How code reaches production

Every change goes through a pull request with at least one approving review from the
owning squad. Continuous integration runs the unit tests, the linters and the
integration suite for the services a change touches. Merging to `main` builds
container images, signs them and deploys them to the staging environment. Production
deploys are automated canaries: five percent of traffic for fifteen minutes, then
twenty-five percent, then everything, with automatic rollback if the error rate or the
latency objective is breached.

| Environment | Purpose | Deployed from | Who can deploy |
|---|---|---|---|
| dev | your laptop, Docker Compose | your branch | you |
| staging | integration with other teams | every merge to `main` | CI only |
| canary | five percent of production traffic | release tag | CI, after approval |
| production | all customer traffic | release tag | CI, after canary |

Deploy freezes apply during the last week of each quarter and on public holidays in
any of our three offices. The freeze calendar is pinned in `#deploys`. A freeze can be
lifted for a fix to a customer-facing incident by the incident commander.

## Working agreements

We write things down. Decisions with consequences beyond one squad get an
architecture decision record in `docs/adr/`, reviewed in the Thursday architecture
forum. We prefer boring technology, small pull requests and reversible changes. When
you disagree, say so early and in writing; when a decision is made, commit to it and
revisit it with data rather than with volume.

Code review is a conversation, not a gate. Reviewers answer within one working day,
explain the reason behind a request, and mark optional suggestions as such. Authors
keep pull requests under about four hundred changed lines and describe how they tested
the change. A pull request that waits longer than two days goes to the squad's
stand-up.

## Who to ask

Your onboarding buddy is your first stop for anything, including questions you think
are too small to ask. For access problems ask in `#it-help`. For questions about a
service, check the owners file at the root of its directory and ask that squad's
channel. For anything about on-call, read the rota workbook in the handbook and ask the
current primary. Nobody expects you to know everything in your first month, and
everybody here was new once.
"""

RUSSIAN_MD = """\
---
title: Руководство по эксплуатации платформы
author: Ольга Смирнова
updated: 2024-03-12
labels: [руководство, эксплуатация]
---

# Руководство по эксплуатации платформы Northwind

Этот документ описывает, как команда платформы Northwind сопровождает общие сервисы в
рабочем окружении: как устроены дежурства, как выпускаются изменения, как мы следим за
состоянием системы и что делать при сбое. Руководство предназначено для инженеров,
которые только присоединились к команде, и для смежных команд, которые пользуются
нашими сервисами.

## Общие принципы

Мы исходим из того, что любой сбой рано или поздно случится, поэтому система должна
переживать отказ отдельного узла, зоны доступности или внешнего поставщика без потери
данных. Каждый сервис имеет владельца, описанные цели по уровню обслуживания и
проверенную процедуру восстановления. Изменения в рабочем окружении выполняются только
через конвейер поставки; ручные правки на серверах запрещены, за исключением действий
дежурного инженера во время инцидента, которые затем обязательно фиксируются в отчёте.

Мы предпочитаем простые и хорошо изученные технологии. Новая база данных или очередь
сообщений появляется в платформе только после архитектурного решения, в котором
описаны причины выбора, стоимость сопровождения и план отказа от неё.

## Дежурства

Дежурство длится одну неделю и начинается в понедельник в десять часов утра по
московскому времени. На каждой неделе есть основной и резервный дежурный, а также
руководитель, к которому можно обратиться для эскалации. Расписание ведётся в
таблице графика дежурств в разделе справочника.

- Основной дежурный отвечает на вызов в течение пятнадцати минут.
- Резервный дежурный подключается, если основной не ответил за пятнадцать минут.
- Руководитель принимает решения о привлечении других команд и о сообщениях клиентам.
- После каждой смены дежурный пишет короткую сводку: что случилось и что стоит улучшить.

Передача смены проходит на короткой встрече в понедельник. Уходящий дежурный
рассказывает об открытых проблемах, о запланированных работах на неделю и о
предупреждениях, которые срабатывали чаще обычного.

## Выпуск изменений

Все изменения проходят проверку кода и автоматические тесты. После слияния в основную
ветку конвейер собирает образы контейнеров, подписывает их и разворачивает в тестовом
окружении. Выпуск в рабочее окружение идёт постепенно: сначала пять процентов трафика,
затем двадцать пять, затем весь трафик. Если растёт доля ошибок или задержка выходит за
пределы целевых значений, конвейер сам откатывает изменение.

В последнюю неделю квартала и в праздничные дни действует запрет на выпуски. Исключение
делается только для исправлений, которые устраняют действующий инцидент, и только с
согласия руководителя инцидента.

## Наблюдаемость

Каждый сервис публикует метрики, журналы и трассировки в общую систему наблюдения.
Для каждого сервиса есть обзорная панель с четырьмя основными сигналами: задержка,
трафик, ошибки и насыщение. Предупреждения настраиваются от целей по уровню
обслуживания, а не от отдельных технических показателей: дежурного будят тогда, когда
под угрозой опыт клиентов, а не тогда, когда процессор загружен на восемьдесят
процентов.

## Действия при сбое

Если вы заметили сбой, объявите инцидент в канале дежурных, даже если не уверены в его
серьёзности. Понизить уровень инцидента проще, чем объяснять, почему о нём узнали
слишком поздно. Руководитель инцидента назначает ответственного за связь, ведёт
хронологию и решает, когда инцидент можно закрыть. В течение пяти рабочих дней после
серьёзного инцидента команда проводит разбор без поиска виноватых и записывает
конкретные задачи по улучшению с владельцами и сроками.

## Контакты

Вопросы по этому руководству задавайте в канале команды платформы. Если вы нашли
ошибку или устаревшие сведения, исправьте документ и отправьте изменение на проверку:
руководство принадлежит всем, кто им пользуется.
"""


# --------------------------------------------------------------------------- plain text

BACKUP_TXT = """\
Database Backup and Restore Runbook
===================================

Owner: Data squad. Last reviewed: 2024-03-11 by Tomas Lindqvist.
Applies to: the orders, inventory and billing PostgreSQL clusters in all regions.

This runbook describes how backups of the platform databases are taken, how to check
that they are healthy, and how to restore a database to a point in time. Read it once
before you need it. During an incident, follow it step by step and write every command
you run into the incident channel.

How backups work
----------------

Every cluster streams its write-ahead log continuously to the backup bucket in the
same region, and takes a full base backup every night at 02:00 UTC. Base backups are
kept for thirty-five days and the write-ahead log for the same period, so any point in
the last thirty-five days can be restored. A weekly copy of the base backup is
replicated to the disaster recovery region and kept for one year.

Backups are encrypted at rest with a key held in the key management service. The
restore role can decrypt them; nobody else can. The backup bucket has object lock
enabled, so a backup cannot be deleted before its retention period ends, not even by
an administrator.

Checking backup health
----------------------

The backup exporter publishes three metrics per cluster: the age of the newest base
backup, the age of the newest archived write-ahead log segment, and the result of the
last automated restore test. An alert fires when the newest base backup is older than
twenty-six hours or the newest log segment is older than fifteen minutes.

To check by hand, log in to the bastion host and run the backup tool's status command
for the cluster. The output lists the base backups with their start time, size and
whether they are complete. An incomplete backup from the current night is normal while
the job is still running; an incomplete backup from a previous night is not.

Every Sunday an automated job restores the newest base backup of each cluster into a
scratch instance, replays the log to a recent point, runs the consistency checks and
compares row counts with the source. A failed restore test opens a ticket for the Data
squad with priority two.

Restoring to a point in time
----------------------------

Restoring replaces data, so it needs the approval of the incident commander and of the
owner of the affected service. Never restore over the live primary. Always restore
into a new instance, verify it, and then switch traffic to it.

Step 1. Decide the target time. Use the incident timeline to find the last moment the
data was known to be good, and pick a time a minute before it. Write the target time
in UTC into the incident channel.

Step 2. Create the restore instance from the infrastructure repository with the
restore template, giving it the cluster name, the target time and a suffix such as
"restore-1". The template provisions an instance of the same size as the primary.

Step 3. Start the restore. The tool fetches the newest base backup taken before the
target time and replays the write-ahead log up to it. A restore of the orders cluster,
about 400 GB, takes roughly fifty minutes.

Step 4. Verify. Run the consistency checks, compare row counts of the main tables with
the numbers from the incident timeline, and ask the owning squad to check a few
records they know.

Step 5. Switch over. Put the service into maintenance mode, point its connection
string at the restored instance, run the smoke tests and take the service out of
maintenance mode. Keep the old primary stopped but not deleted for seven days.

After a restore
---------------

Write down in the incident record what was restored, to which time, how long each
step took and what data was lost between the target time and the switch-over. If the
restore took longer than the recovery time objective of two hours, open a follow-up to
find out why. Ask the Data squad to re-enable the scheduled backups on the new primary
and confirm that the first base backup completes.
"""


# --------------------------------------------------------------------------- HTML

RESTART_HTML = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Runbook: Restarting a platform service</title>
<meta name="author" content="Marcus Okafor">
<style>body { font-family: sans-serif; max-width: 50em; margin: auto; }</style>
</head>
<body>
<nav class="breadcrumbs"><a href="/wiki/spaces/PLAT">Platform</a> &rsaquo;
<a href="/wiki/spaces/PLAT/pages/4102/Runbooks">Runbooks</a></nav>
<main>
<h1>Runbook: Restarting a platform service</h1>
<p>This runbook explains how to restart one of the platform services running on the
Kubernetes clusters without dropping customer requests. A restart is the right first
step when a service is healthy at the infrastructure level but stuck: a deadlocked
worker pool, a connection pool that did not recover after a database failover, or a
configuration change that is only read at start-up. A restart is the wrong step when
the service is failing because of a bad deploy; roll back instead, as described in the
<a href="/wiki/spaces/PLAT/pages/4117/Rolling+back+a+deploy">rollback runbook</a>.</p>

<h2>Before you start</h2>
<ul>
<li>Check the service dashboard: is the problem limited to this service, or are its
dependencies failing too? Restarting a service whose database is down only adds
load.</li>
<li>Announce the restart in <code>#platform-oncall</code> with the service name, the
cluster and the reason.</li>
<li>Make sure you have the <code>deployer</code> role for the cluster; it is granted
after your first on-call shadow shift.</li>
</ul>

<h2>Rolling restart</h2>
<p>A rolling restart replaces the pods one at a time and waits for each new pod to
pass its readiness probe before it stops the next old one. The pod disruption budget
keeps at least two thirds of the replicas serving throughout.</p>
<ol>
<li>Select the cluster and namespace of the service.</li>
<li>Start the rolling restart of the deployment:
<pre><code class="language-bash">kubectl --context prod-eu-1 -n inventory \\
  rollout restart deployment/inventory-api
kubectl --context prod-eu-1 -n inventory \\
  rollout status deployment/inventory-api --timeout=10m
</code></pre>
</li>
<li>Watch the error rate and latency on the service dashboard while the rollout
proceeds. A short rise in latency while caches warm up is expected.</li>
<li>If the rollout does not finish within ten minutes, do not restart again. Look at
the events of the new pods:
<ul>
<li>pods stuck in <code>Pending</code> mean the cluster is out of capacity;</li>
<li>pods in <code>CrashLoopBackOff</code> mean the new pods fail at start-up, often
because a dependency or a secret is missing.</li>
</ul>
</li>
<li>When the rollout is complete, confirm in <code>#platform-oncall</code> that the
service has recovered, or escalate.</li>
</ol>

<h2>Restart times by service</h2>
<table>
<thead>
<tr><th>Service</th><th>Replicas</th><th>Typical rollout</th><th>Notes</th></tr>
</thead>
<tbody>
<tr><td>order-gateway</td>
<td>12</td><td>6 minutes</td><td>drains long-poll connections for 60 s</td></tr>
<tr><td>inventory-api</td>
<td>8</td><td>4 minutes</td><td>warms its cache from Redis on start</td></tr>
<tr><td>billing-worker</td>
<td>4</td><td>3 minutes</td><td>finishes the current invoice batch first</td></tr>
<tr><td>event-router</td>
<td>6</td><td>5 minutes</td><td>rebalances consumer groups after each pod</td></tr>
</tbody>
</table>

<h2>After the restart</h2>
<p>A restart treats the symptom, not the cause. Open a ticket for the owning squad with
the time of the restart, the symptoms you saw and links to the dashboards, so that
they can find out why the service got stuck. If you had to restart the same service
twice in one week, raise it at the Monday on-call handover.</p>
</main>
<footer>Northwind Platform wiki &middot; exported 2024-03-14 &middot; internal use only</footer>
</body>
</html>
"""


# --------------------------------------------------------------------------- DOCX


def _core(properties: Any, title: str, author: str, created: datetime, modified: datetime) -> None:
    properties.title = title
    properties.author = author
    properties.last_modified_by = author
    properties.created = created
    properties.modified = modified
    properties.revision = 3
    properties.subject = "Northwind Platform engineering wiki"
    properties.keywords = "northwind; platform; sample"


INCIDENT_SEVERITIES = [
    ("Severity", "Definition", "Response", "Updates"),
    (
        "SEV1",
        "Customers cannot place orders or pay in one or more regions",
        "Page now, 24x7",
        "Every 30 minutes",
    ),
    (
        "SEV2",
        "A major feature is degraded or one region is slow for many customers",
        "Page now, 24x7",
        "Every hour",
    ),
    (
        "SEV3",
        "A minor feature is broken or an internal tool is unavailable",
        "Next working day",
        "Daily",
    ),
    ("SEV4", "Cosmetic issue or a risk with no customer impact yet", "Ticket to the squad", "None"),
]


def incident_response_docx() -> bytes:
    document = docx.Document()
    _core(
        document.core_properties,
        "Incident Response Process",
        "Marcus Okafor",
        CREATED,
        MODIFIED,
    )
    document.add_heading("Incident Response Process", level=0)
    document.add_paragraph(
        "This document describes how the Northwind Platform team responds to incidents: "
        "events that harm or threaten to harm our customers' ability to browse, order and "
        "pay, or that put customer data at risk. It applies to every service the platform "
        "team owns and to every engineer on the on-call rota. The goal of the process is "
        "to restore service quickly, to keep customers and colleagues informed, and to "
        "learn from every incident so that the same failure does not surprise us twice."
    )

    document.add_heading("Severity levels", level=1)
    document.add_paragraph(
        "Every incident gets a severity as soon as it is declared. When in doubt, choose "
        "the higher severity: it is cheap to downgrade an incident and expensive to "
        "discover an hour later that it deserved more attention. The incident commander "
        "may change the severity at any time and records the change in the timeline."
    )
    table = document.add_table(rows=0, cols=4)
    table.style = "Table Grid"
    for row in INCIDENT_SEVERITIES:
        cells = table.add_row().cells
        for cell, text in zip(cells, row, strict=True):
            cell.text = text
    for cell in table.rows[0].cells:
        for run in cell.paragraphs[0].runs:
            run.bold = True

    document.add_heading("Roles", level=1)
    document.add_paragraph(
        "Small incidents are handled by the primary on-call engineer alone. As soon as "
        "more than one person is working on an incident, the roles below are assigned "
        "explicitly and written into the incident channel's topic."
    )
    for role in (
        "Incident commander: owns the incident, coordinates the responders, decides on "
        "mitigations and on when the incident is over. The commander does not debug.",
        "Communications lead: writes the status page updates and the internal updates "
        "at the interval the severity requires, and answers questions from support.",
        "Operations lead: investigates and applies mitigations, and tells the commander "
        "what they are about to do before they do it.",
        "Scribe: keeps the timeline of observations, decisions and actions with UTC "
        "timestamps, which becomes the backbone of the post-incident review.",
    ):
        document.add_paragraph(role, style="List Bullet")

    document.add_heading("Responding to an incident", level=1)
    document.add_heading("Declare", level=2)
    document.add_paragraph(
        "Anyone can declare an incident, and nobody is ever blamed for declaring one "
        "that turns out to be harmless. Declare it with the incident bot in the "
        "on-call channel; the bot creates a dedicated channel, a video bridge and a "
        "timeline document, and pages the primary on-call engineer."
    )
    document.add_heading("Mitigate", level=2)
    document.add_paragraph(
        "Mitigation comes before diagnosis. The first question is not why the system "
        "failed but how to stop customers from being affected. Work through the "
        "following steps in order and record each one in the timeline:"
    )
    for step in (
        "Confirm the impact from the customer's point of view: dashboards, synthetic "
        "checks and support tickets.",
        "Check what changed recently: deploys, feature flags, configuration and "
        "infrastructure changes in the last twenty-four hours.",
        "If a recent change is a plausible cause, roll it back without waiting for proof.",
        "If capacity is the problem, scale out or shed non-essential load such as "
        "recommendation widgets and batch exports.",
        "If a dependency is failing, fail over to the secondary region or switch to "
        "the degraded mode the service supports.",
        "Once customers are no longer affected, say so in the channel and move from "
        "mitigation to diagnosis.",
    ):
        document.add_paragraph(step, style="List Number")
    document.add_heading("Communicate", level=2)
    document.add_paragraph(
        "The communications lead posts an update at the interval in the severity table, "
        "even when there is nothing new to say: silence is read as neglect. Updates "
        "state what customers experience, what we are doing about it and when the next "
        "update will come. They never speculate about causes or name individuals."
    )
    document.add_heading("Resolve", level=2)
    document.add_paragraph(
        "The incident commander closes the incident when the service has been healthy "
        "for at least thirty minutes and no mitigation needs active supervision. "
        "Temporary mitigations that remain in place get a ticket with an owner before "
        "the incident is closed."
    )

    document.add_heading("Post-incident review", level=1)
    document.add_paragraph(
        "Every SEV1 and SEV2 incident, and any SEV3 incident the team finds instructive, "
        "gets a blameless post-incident review within five working days. The review "
        "reconstructs the timeline, explains the contributing factors, and lists "
        "actions with owners and due dates. We look for the conditions that made the "
        "failure possible and the signals we missed, not for a person to blame: the "
        "people closest to an incident are the best source of what to change."
    )
    document.add_paragraph(
        "Review documents are published in the incident archive and discussed at the "
        "monthly reliability meeting, where the actions from previous reviews are "
        "followed up until they are done or explicitly dropped."
    )
    for paragraph in document.paragraphs:
        if paragraph.style is not None and paragraph.style.name == "Normal":
            paragraph.paragraph_format.space_after = Pt(6)
    return _save(document.save)


def old_policy_docx() -> bytes:
    """The source of `legacy/old-policy.doc` (converted by LibreOffice)."""
    document = docx.Document()
    _core(
        document.core_properties,
        "Acceptable Use of Production Systems (2018)",
        "Helen Barker",
        LEGACY_CREATED,
        LEGACY_CREATED + timedelta(days=30),
    )
    document.add_heading("Acceptable Use of Production Systems", level=0)
    note = document.add_paragraph(
        "Policy PLAT-POL-007, version 1.3, approved 2018-11-02. Superseded in 2023 by "
        "the access management standard; kept for reference."
    )
    note.alignment = WD_ALIGN_PARAGRAPH.CENTER
    document.add_heading("Purpose and scope", level=1)
    document.add_paragraph(
        "This policy sets the rules for accessing and changing the production systems "
        "of the Northwind platform: servers, databases, message queues, load balancers "
        "and the network equipment that connects them. It applies to employees, "
        "contractors and vendors with any level of access to these systems, whether "
        "from the office, from home or from a vendor's premises."
    )
    document.add_heading("Access", level=1)
    document.add_paragraph(
        "Access to production is granted per person and per system, on the request of "
        "the person's manager and with the approval of the system owner. Shared "
        "accounts are not permitted, except for service accounts used by automated "
        "jobs, which are registered with the security team and whose credentials are "
        "stored in the password vault. Access is reviewed every quarter and removed "
        "within one working day when a person changes role or leaves the company."
    )
    for rule in (
        "Log in only through the bastion hosts; direct connections are blocked.",
        "Use your personal account and your hardware token for every session.",
        "Never copy production data to a laptop or to a non-production environment.",
        "Lock your screen whenever you leave your desk with a session open.",
    ):
        document.add_paragraph(rule, style="List Number")
    document.add_heading("Changes", level=1)
    document.add_paragraph(
        "Every change to a production system is recorded in the change calendar before "
        "it is made. Standard changes, such as deploying a release that passed the test "
        "environment, need no further approval. Normal changes need the approval of the "
        "change advisory board, which meets on Tuesdays and Thursdays. Emergency "
        "changes may be made by the on-call engineer to restore service and are "
        "reviewed by the board at its next meeting."
    )
    document.add_heading("Change windows", level=2)
    table = document.add_table(rows=0, cols=3)
    table.style = "Table Grid"
    for row in (
        ("Change type", "Window", "Approval"),
        ("Standard", "Weekdays 09:00-16:00", "None (pre-approved)"),
        ("Normal", "Tuesday and Thursday 20:00-23:00", "Change advisory board"),
        ("Emergency", "Any time", "On-call manager, reviewed afterwards"),
    ):
        cells = table.add_row().cells
        for cell, text in zip(cells, row, strict=True):
            cell.text = text
    document.add_heading("Violations", level=1)
    document.add_paragraph(
        "Breaches of this policy are reported to the security team, which investigates "
        "them with the person's manager. Depending on the severity and on whether the "
        "breach was deliberate, consequences range from additional training to the "
        "withdrawal of access and disciplinary action."
    )
    return _save(document.save)


# --------------------------------------------------------------------------- XLSX

ENGINEERS = [
    ("Priya Raman", "Gateway", "4101", "Europe/London"),
    ("Marcus Okafor", "Gateway", "4102", "Europe/London"),
    ("Tomas Lindqvist", "Data", "4203", "Europe/Stockholm"),
    ("Ольга Смирнова", "Data", "4204", "Europe/Moscow"),
    ("Aiko Tanaka", "Billing", "4305", "Asia/Tokyo"),
    ("Diego Fernández", "Billing", "4306", "Europe/Madrid"),
    ("Hannah Schulz", "Developer Experience", "4407", "Europe/Berlin"),
    ("Kwame Mensah", "Developer Experience", "4408", "Europe/London"),
]
MANAGERS = ["Laura Chen", "Samir Haddad"]


def oncall_rota_xlsx() -> bytes:
    workbook = openpyxl.Workbook()
    workbook.properties.creator = "Hannah Schulz"
    workbook.properties.lastModifiedBy = "Hannah Schulz"
    workbook.properties.title = "On-call Rota 2024 Q2"
    workbook.properties.created = CREATED
    bold = Font(bold=True)
    header_fill = PatternFill("solid", fgColor="DDEBF7")

    rota = workbook.active
    assert rota is not None
    rota.title = "Rota Q2 2024"
    rota.append(["Week starting", "Primary", "Secondary", "Escalation manager", "Notes"])
    notes = {
        1: "Quarter start: billing batch migration on Wednesday",
        4: "Public holiday Monday in London",
        7: "Inventory database upgrade, Thursday 20:00 UTC",
        9: "Game day: regional failover exercise",
        12: "Quarter end: deploy freeze all week",
    }
    start = date(2024, 4, 1)
    rota_names: list[tuple[str, str]] = []
    for week in range(13):
        primary = ENGINEERS[week % len(ENGINEERS)][0]
        secondary = ENGINEERS[(week + 3) % len(ENGINEERS)][0]
        rota_names.append((primary, secondary))
        rota.append(
            [
                start + timedelta(weeks=week),
                primary,
                secondary,
                MANAGERS[week % 2],
                notes.get(week, ""),
            ]
        )
        rota.cell(row=rota.max_row, column=1).number_format = "yyyy-mm-dd"
    for cell in rota[1]:
        cell.font = bold
        cell.fill = header_fill
    rota.freeze_panes = "A2"
    for column, width in zip("ABCDE", (14, 20, 20, 20, 48), strict=True):
        rota.column_dimensions[column].width = width

    contacts = workbook.create_sheet("Contacts")
    contacts.append(["Name", "Squad", "Phone extension", "Time zone", "Shifts this quarter"])
    for name, squad, extension, zone in ENGINEERS:
        shifts = sum(1 for names in rota_names if name in names)
        contacts.append([name, squad, extension, zone, shifts])
    for cell in contacts[1]:
        cell.font = bold
        cell.fill = header_fill
    for column, width in zip("ABCDE", (20, 22, 16, 18, 20), strict=True):
        contacts.column_dimensions[column].width = width
    return _save(workbook.save)


BUDGET_LINES = [
    ("Compute (virtual machines)", 42000, 43500, 45200, 47800),
    ("Managed databases", 18500, 18500, 19800, 19800),
    ("Object storage and backups", 6200, 6600, 7100, 7500),
    ("Network egress", 9400, 10100, 9800, 12300),
    ("Monitoring and logging", 7800, 7800, 8200, 8200),
    ("Software licences", 12000, 3000, 3000, 3000),
    ("Contractors", 25000, 25000, 18000, 18000),
    ("Training and conferences", 4000, 6500, 2500, 7000),
]


def budget_xlsx() -> bytes:
    """The source of `legacy/budget-2019.xls`; its totals are formulas that LibreOffice
    computes during the conversion, so the XLS carries their cached values."""
    workbook = openpyxl.Workbook()
    workbook.properties.creator = "Samir Haddad"
    workbook.properties.title = "Platform Budget 2019"
    workbook.properties.created = LEGACY_CREATED
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Budget 2019"
    sheet.append(["Cost line (EUR)", "Q1", "Q2", "Q3", "Q4", "Year"])
    for line in BUDGET_LINES:
        sheet.append([*line, None])
        row = sheet.max_row
        sheet.cell(row=row, column=6).value = f"=SUM(B{row}:E{row})"
    last = sheet.max_row
    sheet.append(["Total", *(f"=SUM({c}2:{c}{last})" for c in "BCDEF")])
    for cell in (*sheet[1], *sheet[sheet.max_row]):
        cell.font = Font(bold=True)
    sheet.column_dimensions["A"].width = 30

    notes = workbook.create_sheet("Assumptions")
    notes.append(["Topic", "Assumption", "Owner"])
    for row in (
        ("Compute", "Traffic grows 4% per quarter; reserved instances cover 60%", "Samir Haddad"),
        ("Licences", "Annual licences renew in January", "Laura Chen"),
        ("Contractors", "Two contractors until June, then one", "Laura Chen"),
        ("Egress", "Q4 peak from the holiday season, as in 2018", "Samir Haddad"),
    ):
        notes.append(list(row))
    return _save(workbook.save)


# --------------------------------------------------------------------------- PPTX

SLIDES_NOTES = [
    "Welcome everyone. This deck is the ten-minute overview we give to new engineers and "
    "to partner teams. It covers what the platform is, which services it runs, and "
    "where we are going this year. Details live in the linked design documents.",
    "Walk through the request path from the customer's browser to the databases. "
    "Stress that every arrow crossing a region boundary is asynchronous, which is why "
    "a regional outage degrades but does not stop ordering.",
    "The numbers are from the March capacity review. Availability is measured over "
    "the last ninety days against the service level objective in the right column.",
    "Ask the audience which of these items affect their team, and point them to the "
    "architecture forum on Thursdays for the decision records.",
]


def architecture_pptx() -> bytes:
    presentation = pptx.Presentation()
    props = presentation.core_properties
    _core(props, "Northwind Platform Architecture Overview", "Laura Chen", CREATED, MODIFIED)

    title_slide = presentation.slides.add_slide(presentation.slide_layouts[0])
    title_slide.shapes.title.text = "Northwind Platform Architecture Overview"
    title_slide.placeholders[1].text = "Platform engineering · March 2024 · internal"

    context = presentation.slides.add_slide(presentation.slide_layouts[1])
    context.shapes.title.text = "System context"
    body = context.placeholders[1].text_frame
    items = [
        (0, "Customers reach us through the order gateway"),
        (1, "TLS terminates at the regional load balancers"),
        (1, "The gateway authenticates, rate-limits and routes requests"),
        (0, "Core services own their data"),
        (1, "Inventory, orders and billing each have a PostgreSQL cluster"),
        (1, "No service reads another service's database"),
        (0, "The event bus connects the services asynchronously"),
        (1, "Order events drive billing, fulfilment and analytics"),
        (2, "At-least-once delivery; consumers are idempotent"),
        (0, "Two active regions, one disaster recovery region"),
    ]
    body.text = items[0][1]
    for level, text in items[1:]:
        paragraph = body.add_paragraph()
        paragraph.text = text
        paragraph.level = level

    inventory = presentation.slides.add_slide(presentation.slide_layouts[5])
    inventory.shapes.title.text = "Service inventory"
    rows = [
        ("Service", "Squad", "Language", "Requests/s (peak)", "Availability", "SLO"),
        ("order-gateway", "Gateway", "Go", "4,800", "99.97%", "99.95%"),
        ("inventory-api", "Data", "Java", "2,100", "99.96%", "99.9%"),
        ("billing-worker", "Billing", "Python", "350", "99.92%", "99.9%"),
        ("event-router", "Data", "Go", "9,600", "99.99%", "99.95%"),
        ("developer-portal", "Developer Experience", "TypeScript", "40", "99.5%", "99.0%"),
    ]
    shape = inventory.shapes.add_table(
        len(rows), len(rows[0]), Inches(0.4), Inches(1.6), Inches(9.2), Inches(3.6)
    )
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            cell = shape.table.cell(r, c)
            cell.text = text
            for paragraph in cell.text_frame.paragraphs:
                for run in paragraph.runs:
                    run.font.size = PptPt(14)

    roadmap = presentation.slides.add_slide(presentation.slide_layouts[1])
    roadmap.shapes.title.text = "Roadmap 2024"
    frame = roadmap.placeholders[1].text_frame
    plan = [
        (0, "Q2: move the event bus to the managed Kafka service"),
        (1, "Dual-write for four weeks, then cut over per consumer group"),
        (0, "Q3: storage redesign for order history"),
        (1, "Cold orders move to object storage; see the storage design document"),
        (0, "Q4: third active region in Asia-Pacific"),
        (1, "Latency budget: 150 ms p99 for order placement from Tokyo"),
        (0, "All year: cut the cost per order by 15%"),
    ]
    frame.text = plan[0][1]
    for level, text in plan[1:]:
        paragraph = frame.add_paragraph()
        paragraph.text = text
        paragraph.level = level

    for slide, notes in zip(presentation.slides, SLIDES_NOTES, strict=True):
        slide.notes_slide.notes_text_frame.text = notes
    return _save(presentation.save)


# --------------------------------------------------------------------------- PDF

PDF_MARGIN = 72.0
PDF_WIDTH = 595.0 - 2 * PDF_MARGIN
BODY_SIZE = 10.5

STORAGE_INTRO = (
    "This document proposes how the platform stores order history from the third "
    "quarter of 2024. Order history grows by about forty gigabytes a month and is kept "
    "for ten years for tax reasons, yet more than ninety-five percent of reads touch "
    "orders placed in the last ninety days. Keeping all of it in the primary "
    "PostgreSQL cluster makes backups, restores and major version upgrades slower "
    "every month, and it makes the most expensive storage hold the least used data."
)
STORAGE_CURRENT = [
    "Today every order lives in the orders cluster: one primary and two replicas per "
    "active region, with about 2.1 terabytes of data. A nightly base backup takes "
    "three hours and a point-in-time restore of the whole cluster takes close to five "
    "hours, more than twice our recovery time objective of two hours.",
    "Analytics reads order history through the replicas, which competes with customer "
    "traffic at the end of each month when finance runs its reports. Twice this year "
    "the replicas fell more than a minute behind the primary during those reports.",
]
STORAGE_GOALS = [
    "Restore the orders cluster within the two-hour recovery time objective.",
    "Keep reads of recent orders on the primary path at current latency.",
    "Serve reads of older orders within two seconds at the 99th percentile.",
    "Cut storage cost for order history by at least half.",
    "Keep every order for ten years, immutable once archived.",
]
STORAGE_DESIGN = [
    "Orders older than ninety days move from PostgreSQL to object storage as Parquet "
    "files, partitioned by region and month. A nightly archiver job selects the orders "
    "that crossed the threshold, writes them to a new file, verifies the row count and "
    "checksum, and only then deletes them from the database in small batches.",
    "An order history service answers reads for archived orders. It keeps an index "
    "from order id to file and row group in a small key-value table, fetches the row "
    "group on demand and caches recently read files on local disk. The order gateway "
    "routes a read to the database or to the history service by the order's date.",
]
STORAGE_TIERS = [
    ("Tier", "Data", "Store", "Read latency (p99)", "Cost per TB-month"),
    ("Hot", "Last 90 days", "PostgreSQL (SSD)", "15 ms", "EUR 230"),
    ("Warm", "90 days to 2 years", "Object storage, standard", "900 ms", "EUR 21"),
    ("Cold", "2 to 10 years", "Object storage, archive", "1.8 s", "EUR 4"),
]
STORAGE_RISKS = [
    "Archived files are written once and protected by object lock for the retention "
    "period, so a bug in the archiver cannot destroy history that was already "
    "archived. The archiver deletes from the database only after the file has been "
    "read back and verified, and it stops at the first mismatch.",
    "The main risk is a change to the order schema. Parquet files keep the schema they "
    "were written with, so the history service must read every schema version ever "
    "written. Schema changes therefore need a decision record and a compatibility test "
    "against files from each earlier version.",
    "Rollout happens region by region, starting with the smallest. For the first month "
    "the archiver copies without deleting, and the history service answers in shadow "
    "mode so that its answers can be compared with the database.",
]


def _wrap(text: str, fontname: str, size: float, width: float) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}".strip()
        if (
            current
            and _PYMUPDF.get_text_length(candidate, fontname=fontname, fontsize=size) > width
        ):
            lines.append(current)
            current = word
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


class _PdfWriter:
    def __init__(self, doc: Any, title: str) -> None:
        self.doc = doc
        self.title = title
        self.page: Any = None
        self.y = 0.0

    def new_page(self) -> None:
        self.page = self.doc.new_page()
        self.y = PDF_MARGIN

    def heading(self, text: str, size: float) -> None:
        self.y += size * 0.6
        self.page.insert_text((PDF_MARGIN, self.y + size), text, fontname="hebo", fontsize=size)
        self.y += size * 1.3 + 6

    def paragraph(self, text: str, indent: float = 0.0, first: str = "") -> None:
        size = BODY_SIZE
        for i, line in enumerate(_wrap(text, "helv", size, PDF_WIDTH - indent - 12)):
            self.y += size * 1.35
            if i == 0 and first:
                self.page.insert_text((PDF_MARGIN, self.y), first, fontname="helv", fontsize=size)
            self.page.insert_text(
                (PDF_MARGIN + indent, self.y), line, fontname="helv", fontsize=size
            )
        self.y += 11

    def bullets(self, items: Sequence[str]) -> None:
        for item in items:
            self.paragraph(item, indent=14, first="\u2022")
            self.y -= 4

    def table(self, rows: Sequence[Sequence[str]], widths: Sequence[float]) -> None:
        height = 22.0
        top = self.y + 8
        left = PDF_MARGIN
        total = sum(widths)
        for i in range(len(rows) + 1):
            self.page.draw_line((left, top + i * height), (left + total, top + i * height))
        x = left
        for width in (0.0, *widths):
            x += width
            self.page.draw_line((x, top), (x, top + len(rows) * height))
        for i, row in enumerate(rows):
            x = left
            for width, text in zip(widths, row, strict=True):
                self.page.insert_text(
                    (x + 4, top + i * height + 14),
                    text,
                    fontname="hebo" if i == 0 else "helv",
                    fontsize=9,
                )
                x += width
        self.y = top + len(rows) * height + 12

    def running_furniture(self) -> None:
        """A running header and footer on every page (the normalizer removes them)."""
        count = self.doc.page_count
        for number, page in enumerate(self.doc, start=1):
            page.insert_text(
                (PDF_MARGIN, 40), "Northwind Platform - Engineering", fontname="helv", fontsize=8
            )
            page.insert_text(
                (PDF_MARGIN, 810),
                f"{self.title} - internal - page {number} of {count}",
                fontname="helv",
                fontsize=8,
            )


def storage_design_pdf() -> bytes:
    doc = _PYMUPDF.open()
    title = "Storage Design: Order History"
    writer = _PdfWriter(doc, title)

    writer.new_page()
    writer.heading(title, 20)
    writer.paragraph("Author: Tomas Lindqvist. Status: accepted. Last updated 2024-03-12.")
    writer.paragraph(STORAGE_INTRO)
    writer.heading("Current state", 14)
    for text in STORAGE_CURRENT:
        writer.paragraph(text)
    writer.heading("Goals", 14)
    writer.paragraph("The design has to meet the following goals, in order of priority:")
    writer.bullets(STORAGE_GOALS)

    writer.new_page()
    writer.heading("Proposed design", 14)
    writer.heading("Archiver", 12.5)
    writer.paragraph(STORAGE_DESIGN[0])
    writer.heading("History service", 12.5)
    writer.paragraph(STORAGE_DESIGN[1])
    writer.heading("Storage tiers", 12.5)
    writer.paragraph(
        "Data moves between three tiers by age. The table lists each tier with its "
        "store, its read latency at the 99th percentile and its cost."
    )
    writer.table(STORAGE_TIERS, (50, 95, 130, 95, 95))
    writer.paragraph(
        "Moving from warm to cold storage is a lifecycle rule of the bucket and needs no "
        "code. Reads of cold objects are slower and cost a retrieval fee, which is "
        "acceptable because they happen a few hundred times a month, mostly for audits."
    )

    writer.new_page()
    writer.heading("Risks and rollout", 14)
    for text in STORAGE_RISKS:
        writer.paragraph(text)
    writer.heading("Decision", 14)
    writer.paragraph(
        "The architecture forum accepted this design on 2024-03-07. The Data squad owns "
        "the archiver and the history service; the Gateway squad owns the routing change. "
        "Work starts in the third quarter, after the event bus migration."
    )
    writer.running_furniture()
    assert doc.page_count == 3, doc.page_count
    stamp = "D:20240314164500Z"
    doc.set_metadata(
        {
            "title": title,
            "author": "Tomas Lindqvist",
            "subject": "Northwind Platform engineering wiki",
            "creator": "samples/build.py",
            "producer": "PyMuPDF",
            "creationDate": "D:20240304093000Z",
            "modDate": stamp,
        }
    )
    data: bytes = doc.tobytes(garbage=3, deflate=True, no_new_id=True)
    doc.close()
    return data


def corrupt_pdf(valid: bytes) -> bytes:
    """A PDF cut off after its first 40% of bytes: no cross-reference table, no end-of-file
    marker (a copy interrupted mid-transfer)."""
    return valid[: len(valid) * 2 // 5]


# --------------------------------------------------------------------------- legacy


def _soffice_convert(data: bytes, suffix: str, export_filter: str, target_ext: str) -> bytes:
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    assert soffice is not None
    with tempfile.TemporaryDirectory(prefix="samples-soffice-") as workdir:
        root = Path(workdir)
        source = root / f"document{suffix}"
        source.write_bytes(data)
        subprocess.run(
            [
                soffice,
                f"-env:UserInstallation={(root / 'profile').as_uri()}",
                "--headless",
                "--norestore",
                "--convert-to",
                export_filter,
                "--outdir",
                str(root / "out"),
                str(source),
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )
        return (root / "out" / f"document.{target_ext}").read_bytes()


# --------------------------------------------------------------------------- pictures

THIRD_PARTY = HERE / "third_party"
# draw.io's example threat model (jgraph/drawio-diagrams, blog/threat-modelling.drawio).
THREAT_MODEL_SOURCE = THIRD_PARTY / "drawio-diagrams" / "threat-modelling.drawio"

DEPLOY_DIALOG_HTML = """\
<!doctype html>
<html><head><meta charset="utf-8"><style>
body { margin: 0; background: #e5e7eb; font: 14px "DejaVu Sans", sans-serif; }
.window { margin: 24px auto; width: 520px; background: #fff; border: 1px solid #9ca3af; }
.title { background: #1f2937; color: #fff; padding: 7px 12px; font-weight: bold; }
.body { padding: 14px 18px; line-height: 1.45; }
.code { font-family: "DejaVu Sans Mono", monospace; }
.buttons { text-align: right; padding: 0 18px 14px; }
.buttons span { display: inline-block; border: 1px solid #6b7280; padding: 5px 14px;
  margin-left: 8px; border-radius: 3px; }
</style></head><body><div class="window">
<div class="title">Northwind Deploy Console</div>
<div class="body"><b>Deployment blocked</b><br>
The canary of order-gateway 3.18.2 was rolled back: the error rate reached 4.7 percent,
over the objective of 1 percent.<br>
Error code <span class="code">DEPLOY-417</span>. See the rollback runbook.</div>
<div class="buttons"><span>View logs</span><span>Close</span></div>
</div></body></html>
"""
SCREENSHOT_FILE = "runbooks/deploy-blocked.png"
SCREENSHOT_SIZE = (600, 260)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def deploy_dialog_png() -> bytes:
    """A screenshot of the deploy console's error dialog, by headless Chromium."""
    chromium = _chromium()
    assert chromium is not None
    with tempfile.TemporaryDirectory(prefix="samples-chromium-") as workdir:
        root = Path(workdir)
        page = root / "dialog.html"
        page.write_text(DEPLOY_DIALOG_HTML, encoding="utf-8")
        shot = root / "dialog.png"
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",  # as root in a container Chromium refuses its sandbox
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={root / 'profile'}",
                f"--window-size={SCREENSHOT_SIZE[0]},{SCREENSHOT_SIZE[1]}",
                f"--screenshot={shot}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return shot.read_bytes()


# --------------------------------------------------------------------------- main

TEXT_FILES: dict[str, str] = {
    "handbook/onboarding.md": ONBOARDING_MD,
    "ru/руководство.md": RUSSIAN_MD,
    "runbooks/backup.txt": BACKUP_TXT,
    "runbooks/restart-service.html": RESTART_HTML,
}
LEGACY_FILES = ("legacy/old-policy.doc", "legacy/budget-2019.xls")


def build(out: Path, *, legacy: bool = True, screenshot: bool = True) -> list[Path]:
    """Writes the corpus under `out`; returns the files written."""
    files: dict[str, bytes] = {name: text.encode() for name, text in TEXT_FILES.items()}
    files["architecture/threat-model.drawio"] = THREAT_MODEL_SOURCE.read_bytes()
    if screenshot:
        files[SCREENSHOT_FILE] = deploy_dialog_png()
    files["handbook/incident-response.docx"] = incident_response_docx()
    files["handbook/oncall-rota.xlsx"] = oncall_rota_xlsx()
    files["architecture/overview.pptx"] = architecture_pptx()
    pdf = storage_design_pdf()
    files["architecture/storage-design.pdf"] = pdf
    files["broken/corrupt.pdf"] = corrupt_pdf(pdf)
    if legacy:
        files["legacy/old-policy.doc"] = _soffice_convert(
            old_policy_docx(), ".docx", "doc:MS Word 97", "doc"
        )
        files["legacy/budget-2019.xls"] = _soffice_convert(
            budget_xlsx(), ".xlsx", "xls:MS Excel 97", "xls"
        )
    written = []
    for name, data in sorted(files.items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument(
        "--skip-legacy",
        action="store_true",
        help="do not rebuild the .doc/.xls (they need LibreOffice); keep what is there",
    )
    parser.add_argument(
        "--skip-screenshot",
        action="store_true",
        help="do not retake the screenshot (it needs Chromium); keep what is there",
    )
    args = parser.parse_args(argv)
    legacy = not args.skip_legacy
    screenshot = not args.skip_screenshot
    if screenshot and not _chromium():
        print(f"chromium not found: keeping the committed {SCREENSHOT_FILE}", file=sys.stderr)
        screenshot = False
    if legacy and not (shutil.which("soffice") or shutil.which("libreoffice")):
        print(
            "soffice not found: keeping the committed " + ", ".join(LEGACY_FILES),
            file=sys.stderr,
        )
        legacy = False
    for path in build(args.out, legacy=legacy, screenshot=screenshot):
        print(f"{path.stat().st_size:>8,}  {path.relative_to(args.out).as_posix()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

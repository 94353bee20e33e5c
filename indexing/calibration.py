"""Calibration text for the start-up window check (`indexing.window`): paragraphs of the
kinds a chunk holds (prose, lists, code, configuration, tables, reference text with
identifiers and URLs), per language. The check tokenizes each with the embedding model's
tokenizer and with the chunking tokenizer and takes the worst ratio, so a model whose
tokenizer splits some kind of text finer than BGE-M3 (code for a WordPiece vocabulary,
Cyrillic for an English one) is measured on that kind too.

Written for this project (no third-party text).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

CALIBRATION: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "en": (
            "When a node stops answering health checks, the load balancer takes it out of "
            "rotation within thirty seconds. The on-call engineer then looks at the service "
            "dashboard, checks whether the last deployment changed anything, and decides "
            "whether to roll back or to restart the process. Most incidents are resolved by "
            "the rollback; a restart only hides the problem until the next peak of traffic.",
            "- Open the incident channel and post the first status update.\n"
            "- Page the database owner if replication lag exceeds five minutes.\n"
            "- Freeze deployments until the root cause is understood.\n"
            "  - Exceptions need the approval of the release manager.\n"
            "- Write the post-mortem within two working days.",
            "```python\n"
            "def restore_snapshot(client: StorageClient, snapshot_id: str, *, "
            "dry_run: bool = False)"
            " -> int:\n"
            '    """Restore every volume of a snapshot; '
            'returns the number of restored volumes."""\n'
            "    volumes = client.list_volumes(snapshot_id=snapshot_id, page_size=100)\n"
            "    for volume in volumes:\n"
            "        if not dry_run:\n"
            "            client.restore(volume.volume_id, "
            "target_zone=volume.zone or DEFAULT_ZONE)\n"
            "    return len(volumes)\n"
            "```",
            "```yaml\n"
            "backup:\n"
            "  schedule: '0 2 * * *'\n"
            "  retention_days: 30\n"
            "  target: s3://backups-prod-eu-west-1/postgres/\n"
            "  encryption: {kms_key_id: arn:aws:kms:eu-west-1:123456789012:key/abcd-1234}\n"
            "```\n"
            "Run `kubectl -n storage rollout restart deployment/backup-agent` after editing it.",
            "| Service | Owner | SLO | Escalation |\n"
            "| --- | --- | --- | --- |\n"
            "| auth-gateway | Identity team | 99.95% | #identity-oncall |\n"
            "| billing-api | Payments | 99.9% | payments-pager@example.com |\n"
            "| search-indexer | Platform | 99.5% | #platform-oncall |",
            "The endpoint `GET /api/v2/projects/{projectId}/builds?status=FAILED&limit=50` "
            "returns the failed builds of a project; see https://docs.example.com/api/v2/builds "
            "for the schema. Set the header X-Request-ID to correlate retries, and use "
            "HTTP_PROXY/NO_PROXY when the CI runner sits behind the corporate proxy.",
            "|      |   Requests (k) |   Errors |   p99 latency (ms) |\n"
            "|------|----------------|----------|--------------------|\n"
            "| 2021 |          1,250 |       14 |              312.5 |\n"
            "| 2022 |          1,730 |        9 |              287.25 |\n"
            "| 2023 |          2,410 |       21 |              301.75 |",
            "- [Runbooks](https://wiki.example.com/display/OPS/Runbooks+Index) - "
            "[Architecture decisions](/wiki/spaces/ARCH/pages/123456/ADR-007_Storage_tiering) - "
            "[Münchner Büro](https://intranet.example.de/standorte/m%C3%BCnchen) - "
            "[FAQ](#faq) - 1.1. Scope A.1 - 1.2. Glossary A.2",
        ),
        "ru": (
            "Если узел перестаёт отвечать на проверки состояния, балансировщик выводит его из "
            "ротации в течение тридцати секунд. Дежурный инженер смотрит панель мониторинга "
            "сервиса, проверяет, что изменилось в последнем развёртывании, и решает, нужно ли "
            "откатить версию или перезапустить процесс.",
            "- Откройте канал инцидента и опубликуйте первое сообщение о статусе.\n"
            "- Вызовите владельца базы данных, если отставание репликации больше пяти минут.\n"
            "- Остановите развёртывания, пока причина не найдена.\n"
            "- Напишите разбор инцидента в течение двух рабочих дней.",
            "| Сервис | Владелец | Цель доступности | Эскалация |\n"
            "| --- | --- | --- | --- |\n"
            "| шлюз авторизации | команда идентификации | 99,95% | канал дежурных |\n"
            "| сервис платежей | платёжная команда | 99,9% | телефон дежурного |",
            "Резервные копии создаются каждую ночь в два часа по расписанию `0 2 * * *` и "
            "хранятся тридцать дней. Чтобы восстановить базу, запустите "
            "`restore_snapshot(client, snapshot_id)` с параметром `dry_run=True`, проверьте "
            "список томов и только потом повторите команду без него.",
        ),
    }
)

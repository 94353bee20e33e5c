"""Questions of `bench/retrieval.py`: (document, question, evidence, kind).

The document is a path from the repository root (Docling's test inputs in
`tests/corpus/docling/`, the quickstart samples in `samples/docs/`, the specification's
seed documents in `tests/corpus/seeds/`); the evidence is an exact passage of that
document's normalized Markdown (whitespace runs count as one space) that answers the
question. Questions are asked as a user who has not read the document would ask them: in
other words than the document's, avoiding its distinctive terms where a reader would not
know them. Written for this benchmark by reading the documents, before any method was
measured on them; every other document of the corpus is a distractor.

Kinds: `prose` (English questions about prose), `identifier` (the answer is an option,
a command, a file, an error code or another identifier the asker does not know), `ru`
(Russian questions about Russian text).
"""

from __future__ import annotations

from typing import NamedTuple


class Question(NamedTuple):
    document: str
    text: str
    evidence: str
    kind: str = "prose"

    @property
    def key(self) -> str:
        """What its half (`bench/halves.py`) is drawn from."""
        return f"{self.document}/{self.text}"


ONBOARDING = "samples/docs/handbook/onboarding.md"
INCIDENTS = "samples/docs/handbook/incident-response.docx"
STORAGE = "samples/docs/architecture/storage-design.pdf"
RESTART = "samples/docs/runbooks/restart-service.html"
BACKUP = "samples/docs/runbooks/backup.txt"
OVERVIEW = "samples/docs/architecture/overview.pptx"
POLICY = "samples/docs/legacy/old-policy.doc"
ROTA = "samples/docs/handbook/oncall-rota.xlsx"
BUDGET = "samples/docs/legacy/budget-2019.xls"
DUCK = "tests/corpus/docling/html/wiki_duck.html"
RCAC = "tests/corpus/docling/pdf/redp5110_sampled.pdf"
WORD = "tests/corpus/docling/pdf/multi_page.pdf"
NUTS = "tests/corpus/docling/pdf/amt_handbook_sample.pdf"
OTSL = "tests/corpus/docling/pdf/2305.03393v1-pg9.pdf"
SWIM = "tests/corpus/docling/docx/word_sample.docx"
LEGAL = "tests/corpus/docling/pdf/table_mislabeled_as_picture.pdf"
GUIDE_RU = "samples/docs/ru/руководство.md"
SPEC_RU = "tests/corpus/seeds/000_d44f27c2427061b7.txt"
SPEC_EN = "tests/corpus/seeds/002_3869281a0d2177e7.txt"
ADR = "tests/corpus/seeds/003_a92e70e3f401518d.txt"
CHUNKANA = "tests/corpus/seeds/004_a97893bd6abbb83f.txt"

QUESTIONS: tuple[Question, ...] = tuple(
    Question(*q)
    for q in (
        (
            ONBOARDING,
            "What is the headcount of the team that runs the shared services?",
            "We are twenty-three engineers in three time zones",
        ),
        (
            ONBOARDING,
            "After how many days do my production permissions lapse?",
            "it expires after ninety days unless your squad lead renews it",
        ),
        (
            ONBOARDING,
            "What compiles our Go and Java code?",
            "The build uses Bazel for the Go and Java services and uv for the Python tooling",
        ),
        (
            ONBOARDING,
            "The setup script broke on my machine, where do I get help?",
            "run it again with `--verbose` and post the output in `#platform`",
        ),
        (
            ONBOARDING,
            "What share of users gets a new release first, and for how long?",
            "five percent of traffic for fifteen minutes, then twenty-five percent, then everything",
        ),
        (
            ONBOARDING,
            "Is there a size limit for code changes submitted for review?",
            "keep pull requests under about four hundred changed lines",
        ),
        (
            INCIDENTS,
            "How frequently must customers be told about progress when one region is degraded?",
            "one region is slow for many customers | Page now, 24x7 | Every hour",
        ),
        (
            INCIDENTS,
            "Which role writes down what happened, with times, during an outage?",
            "Scribe: keeps the timeline of observations, decisions and actions with UTC timestamps",
        ),
        (
            INCIDENTS,
            "Do I need to confirm a release is at fault before reverting it?",
            "If a recent change is a plausible cause, roll it back without waiting for proof.",
        ),
        (
            INCIDENTS,
            "How long must things be stable before we can declare an outage over?",
            "closes the incident when the service has been healthy for at least thirty minutes",
        ),
        (
            INCIDENTS,
            "What is the deadline for the retrospective after a serious outage?",
            "gets a blameless post-incident review within five working days",
        ),
        (
            STORAGE,
            "By how much does the volume of past purchases increase monthly?",
            "Order history grows by about forty gigabytes a month",
        ),
        (
            STORAGE,
            "Why are we missing our two-hour recovery target today?",
            "a point-in-time restore of the whole cluster takes close to five hours",
        ),
        (
            STORAGE,
            "How slow are reads of orders between three months and two years old?",
            "Object storage, standard | 900 ms",
        ),
        (
            STORAGE,
            "Is data removed from Postgres right away when the migration job is rolled out?",
            "For the first month the archiver copies without deleting",
        ),
        (
            RESTART,
            "In which situation should I revert instead of bouncing the pods?",
            "A restart is the wrong step when the service is failing because of a bad deploy",
        ),
        (
            RESTART,
            "Replacement containers never get scheduled, what does that indicate?",
            "pods stuck in `Pending` mean the cluster is out of capacity",
        ),
        (
            RESTART,
            "How many instances of the entry-point API run, and how many minutes does cycling them take?",
            "| order-gateway | 12 | 6 minutes |",
        ),
        (
            RESTART,
            "How much capacity stays up while instances are replaced one by one?",
            "keeps at least two thirds of the replicas serving",
        ),
        (
            BACKUP,
            "For how many days can we go back when recovering Postgres?",
            "Base backups are kept for thirty-five days",
        ),
        (
            BACKUP,
            "What age of the nightly snapshot triggers a page?",
            "An alert fires when the newest base backup is older than twenty-six hours",
        ),
        (
            BACKUP,
            "Roughly how long is the recovery of the 400 GB cluster?",
            "about 400 GB, takes roughly fifty minutes",
        ),
        (
            BACKUP,
            "How do we know our snapshots are usable without waiting for a disaster?",
            "Every Sunday an automated job restores the newest base backup",
        ),
        (
            BACKUP,
            "Can I delete the former main database right after cutting over?",
            "Keep the old primary stopped but not deleted for seven days",
        ),
        (
            OVERVIEW,
            "Can a subscriber receive the same message twice?",
            "At-least-once delivery; consumers are idempotent",
        ),
        (
            OVERVIEW,
            "How quickly should checkout respond for Japanese customers after the new region?",
            "Latency budget: 150 ms p99 for order placement from Tokyo",
        ),
        (
            OVERVIEW,
            "Which service has the highest throughput, and how much?",
            "| event-router | Data | Go | 9,600 |",
        ),
        (
            POLICY,
            "When can a non-standard modification to production get approved?",
            "the change advisory board, which meets on Tuesdays and Thursdays",
        ),
        (
            POLICY,
            "What happens to someone's server permissions on their last day?",
            "removed within one working day when a person changes role or leaves the company",
        ),
        (
            ROTA,
            "Who carries the pager first in the third week of May?",
            "| 2024-05-20 | Kwame Mensah |",
        ),
        (
            BUDGET,
            "What was the annual spend on outbound data traffic?",
            "| Network egress | 9400 | 10100 | 9800 | 12300 | 41600 |",
        ),
        (
            DUCK,
            "What do you call the males of this bird?",
            "A male is called a [drake](https://en.wiktionary.org/wiki/drake)",
        ),
        (
            DUCK,
            "What is the origin of the bird's name?",
            "The word *duck* comes from [Old English](/wiki/Old_English) *dūce* 'diver'",
        ),
        (
            DUCK,
            "Is the myth about their call not producing a reverberation true?",
            "claims that duck quacks do not echo; however, this has been proven to be false",
        ),
        (
            DUCK,
            "How large is global production of these birds as food?",
            "Approximately 3 billion ducks are slaughtered each year for meat worldwide.",
        ),
        (
            DUCK,
            "Is it harmful to give them leftover baked goods at the pond?",
            "ducks should not be fed with bread because it",
        ),
        (
            DUCK,
            "Is there any part of the world where these birds do not live?",
            "are found on every continent except Antarctica",
        ),
        (
            DUCK,
            "What filters water at the side of the beak?",
            "Along the edge of the bill, there is a comb-like structure called a [pecten]",
        ),
        (
            DUCK,
            "What hunts adult birds in the air?",
            "In flight, ducks are safe from all but a few predators such as humans and the "
            "[peregrine falcon]",
        ),
        (
            DUCK,
            "What is the wild ancestor of farmyard breeds?",
            "Almost all the varieties of domestic ducks are descended from the [mallard]",
        ),
        (
            DUCK,
            "Which animal makes jokes funniest according to research?",
            "ducks attract the most humor and silliness",
        ),
        (
            DUCK,
            "Why do species that feed underwater struggle to take off?",
            "To be able to submerge more easily, the diving ducks are heavier than dabbling ducks",
        ),
        (
            RCAC,
            "How many security incidents exposing records have happened in the last decade or so?",
            "almost 5000 data breaches have occurred since 2005",
        ),
        (
            RCAC,
            "Out of the box, what access do all users get to newly created objects?",
            "the default setting for the Create default public authority (QCRTAUT) system value "
            "is *CHANGE",
        ),
        (
            RCAC,
            "How do I let a consultant administer the access rules, with an example?",
            "CHGFCNUSG FCNID(QIBM_DB_SECADM) USER(HBEDOYA) USAGE(*ALLOWED)",
        ),
        (
            RCAC,
            "What special authority is needed to hand out the security administrator function?",
            "QIBM_DB_SECADM function usage can be granted only by a user with *SECADM special "
            "authority",
        ),
        (
            RCAC,
            "What does the group membership check give back when the user is not in the list?",
            "Otherwise, it returns a value of 0. It never returns the null value.",
        ),
        (
            RCAC,
            "How many read-only system variables describe the connection?",
            "IBM DB2 for i supports nine different built-in global variables",
        ),
        (
            RCAC,
            "When ALICE calls a routine owned by JOE, which identity includes the owner's rights?",
            "The special register CURRENT USER contains the value of JOE because it includes any "
            "adopted authority",
        ),
        (
            RCAC,
            "How is a social security number shown to a supervisor who is not its owner?",
            "Managers see a masked version of TAX_ID with the first five characters replaced with "
            "the X character",
        ),
        (
            RCAC,
            "After creating the permission and masks, what statement makes them take effect on the HR table?",
            "ALTER TABLE HR_SCHEMA.EMPLOYEES ACTIVATE ROW ACCESS CONTROL ACTIVATE COLUMN ACCESS "
            "CONTROL",
        ),
        (
            WORD,
            "Who invented the first machine for typing letters?",
            "Patented in 1868 by Christopher Latham Sholes",
        ),
        (
            WORD,
            "In what year did the powered version of the writing machine appear?",
            "the electric typewriter (introduced by IBM in 1935)",
        ),
        (
            WORD,
            "Which 1960s device could record and replay typed text?",
            "this machine combined IBM's Selectric typewriter with magnetic tape storage",
        ),
        (
            WORD,
            "What editing program did law firms prefer?",
            "WordPerfect, which was popular among legal professionals",
        ),
        (
            WORD,
            "When did browser editors with live co-editing arrive?",
            "Google Docs (2006): The introduction of cloud-based word processing revolutionized "
            "collaboration",
        ),
        (
            NUTS,
            "Into which categories do locking fasteners fall?",
            "The two general types of self-locking nuts currently in use are the all-metal type "
            "and the fiber lock type",
        ),
        (
            NUTS,
            "Which metal is used for the bellows variant?",
            "the bellows type is made of aluminum alloy only",
        ),
        (
            NUTS,
            "Why can the steel locknut be turned by hand at first?",
            "its locking action takes places only when the nut is seated against a solid surface "
            "and tightened",
        ),
        (
            OTSL,
            "Which processor was used for the timing experiments?",
            "single core with AMD EPYC 7763 CPU @2.45 GHz",
        ),
        (
            OTSL,
            "What speedup does the new table representation bring?",
            "OTSL yields a 2x speed up",
        ),
        (
            OTSL,
            "How big is the financial tables dataset?",
            "FinTabNet (113k samples)",
        ),
        (
            SWIM,
            "How much energy is in a serving of fruit for the duck?",
            "Berries | Blueberry, Strawberry, Cranberry | 150",
        ),
        (
            LEGAL,
            "What are students in campus clinics permitted to handle?",
            "what type of legal aid services is a student authorized to undertake?",
        ),
        # --- the answer is an identifier, option, command, file or error code ---
        (
            SPEC_EN,
            "Which error code does a document get when its bytes cannot be decoded as text?",
            "UTF-8 decoding errors MUST fail the source with `CHUNKING_FAILED`",
            "identifier",
        ),
        (
            SPEC_EN,
            "What step has to run before the text is cut into pieces?",
            "Input to chunking MUST be normalized Markdown produced by the `NORMALIZE_MARKDOWN` "
            "pipeline stage",
            "identifier",
        ),
        (
            SPEC_EN,
            "Under which names are the references between wiki pages stored?",
            "persisted to `document_links`/`cross_links` mapping",
            "identifier",
        ),
        (
            ADR,
            "Which environment variable sets the largest piece size?",
            "CHUNK_MAX_TOKENS=300",
            "identifier",
        ),
        (
            ADR,
            "Which script reports how big the pieces come out?",
            "python scripts/deep_analysis.py",
            "identifier",
        ),
        (
            ADR,
            "In which source file is the splitter that runs in production?",
            "**Модуль**: `ingestion/chunking/universal_chunker.py`",
            "identifier",
        ),
        (
            CHUNKANA,
            "Which renderer adds only the context that comes before each piece?",
            "`render_with_prev_overlap(chunks: list[Chunk]) -> list[str]` renderer that embeds "
            "only previous overlap",
            "identifier",
        ),
        (
            CHUNKANA,
            "What command does the build pipeline run so the published description renders?",
            "THE CI SHALL run `twine check dist/*` to validate package metadata and README "
            "rendering",
            "identifier",
        ),
        (
            CHUNKANA,
            "What were the old plugin's default largest and smallest piece sizes?",
            "max_chunk_size=4096, min_chunk_size=512, overlap_size=200",
            "identifier",
        ),
        (
            RCAC,
            "Which function tells whether the person running a query belongs to certain "
            "profiles, and since which release?",
            "The VERIFY_GROUP_FOR_USER function was added in IBM i 7.2.",
            "identifier",
        ),
        (
            RESTART,
            "Which permission do I need before I can bounce an app in production?",
            "Make sure you have the `deployer` role for the cluster",
            "identifier",
        ),
        (
            RESTART,
            "What state name tells me the new instances die right after launch?",
            "pods in `CrashLoopBackOff` mean the new pods fail at start-up",
            "identifier",
        ),
        (
            RESTART,
            "How do I follow a restart until every replica is back, and how long does it wait?",
            "rollout status deployment/inventory-api --timeout=10m",
            "identifier",
        ),
        (
            ONBOARDING,
            "Where can I see the dates when releases are blocked?",
            "The freeze calendar is pinned in `#deploys`",
            "identifier",
        ),
        (
            ONBOARDING,
            "Which team membership do I ask for to reach the platform tools, and how long "
            "until it is approved?",
            "Request the `platform-engineers` group in the access portal; approval takes a day.",
            "identifier",
        ),
        (
            ONBOARDING,
            "In which folder of the repository are design choices written down?",
            "architecture decision record in `docs/adr/`",
            "identifier",
        ),
        (
            ADR,
            "В каком файле настроек до сих пор старые размеры фрагментов?",
            "| `app/config/app_config.py` | 410 | 500 | ⚠️ Устарело (требует обновления) |",
            "identifier",
        ),
        (
            ADR,
            "Сколько результатов поиска теперь берут, чтобы покрыть документ?",
            "Используем k=20-30 вместо k=10-15",
            "identifier",
        ),
        (
            SPEC_RU,
            "Какая константа ограничивает самый большой фрагмент в первой версии правил?",
            "`MAX\\_TOKENS\\_PER\\_CHUNK = 900`",
            "identifier",
        ),
        # --- Russian questions about Russian text ---
        (
            ADR,
            "Почему отказались от фрагментов по 350–600 токенов?",
            "Информация из разных разделов сливалась в один ответ",
            "ru",
        ),
        (
            GUIDE_RU,
            "В какой день и час происходит пересменка у тех, кто на вызове?",
            "начинается в понедельник в десять часов утра по московскому времени",
            "ru",
        ),
        (
            GUIDE_RU,
            "Как быстро первый на смене должен отреагировать на тревогу?",
            "Основной дежурный отвечает на вызов в течение пятнадцати минут.",
            "ru",
        ),
        (
            GUIDE_RU,
            "Когда нельзя выкатывать новые версии?",
            "В последнюю неделю квартала и в праздничные дни действует запрет на выпуски.",
            "ru",
        ),
        (
            GUIDE_RU,
            "Будят ли человека на смене из-за высокой нагрузки на CPU?",
            "а не тогда, когда процессор загружен на восемьдесят процентов",
            "ru",
        ),
        (
            GUIDE_RU,
            "Когда проводят анализ причин после крупной аварии?",
            "В течение пяти рабочих дней после серьёзного инцидента команда проводит разбор без "
            "поиска виноватых",
            "ru",
        ),
        (
            GUIDE_RU,
            "Какие основные показатели видны для каждого сервиса?",
            "задержка, трафик, ошибки и насыщение",
            "ru",
        ),
        (
            SPEC_RU,
            "Можно ли звать языковую модель при подготовке текста?",
            "LLM на этапе preprocessing запрещён.",
            "ru",
        ),
        (
            SPEC_RU,
            "У каких видов фрагментов не бывает захвата соседнего текста?",
            "Для `table` и `list` overlap запрещён (чтобы не плодить дубли).",
            "ru",
        ),
        (
            ADR,
            "Сколько времени уходит на разбиение одного документа?",
            "Chunking остается быстрым (<100ms на документ)",
            "ru",
        ),
    )
)

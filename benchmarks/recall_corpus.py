"""Recall corpus: facts a team stores in long-term memory, the questions that recall them.

Hand-written for this benchmark, to measure recall quality (keyword BM25
against dense embeddings against a hybrid of both). Each ``Fact`` is one
memory a team member would write, with two later questions it answers:

- ``lexical`` shares at least two content words with the memory, as a user
  who remembers how it was put would ask;
- ``paraphrased`` means the same in other words and shares NO content word
  with the memory (by ``terms``, the tokenizer keyword recall uses), so a
  keyword ranker has nothing to match on.

``check_corpus`` enforces both at import and names any fact that breaks
them. ``distractors`` adds seeded, on-topic sentences about made-up teams,
services and people: they share many words with the questions (hard
negatives) and state none of the facts. ``corpus`` puts them together: the
facts' memories first, then the distractors, and two questions per fact,
each with the index of the item that answers it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from shared_state.memory.recall import terms


@dataclass(frozen=True)
class Fact:
    topic: str
    memory: str
    lexical: str
    paraphrased: str


FACTS: tuple[Fact, ...] = (
    # deploy
    Fact(
        "deploy",
        "We deploy blue-green via Argo CD, switching traffic after smoke tests pass.",
        "How do we deploy with Argo CD?",
        "How does new code reach production?",
    ),
    Fact(
        "deploy",
        "Production deploys are frozen from December 20 to January 3 every year.",
        "When are production deploys frozen?",
        "Is there a holiday period where shipping changes is blocked?",
    ),
    Fact(
        "deploy",
        "To roll back a bad release, run make rollback; it redeploys the previous image tag.",
        "What does make rollback redeploy?",
        "If a new version breaks things, how can I undo it quickly?",
    ),
    Fact(
        "deploy",
        "Staging is refreshed from a production snapshot every Sunday at 02:00 UTC.",
        "When is staging refreshed from a production snapshot?",
        "How often does the pre-prod environment get a copy of live data?",
    ),
    Fact(
        "deploy",
        "Feature flags live in LaunchDarkly and must be removed within 30 days of full rollout.",
        "How long can a LaunchDarkly feature flag stay after full rollout?",
        "What is the deadline for deleting toggles once something ships to everyone?",
    ),
    Fact(
        "deploy",
        "Schema migrations run as a separate Kubernetes Job before new pods start.",
        "Do schema migrations run as a Kubernetes job?",
        "At what point in a rollout are table changes applied?",
    ),
    Fact(
        "deploy",
        "Container images are built by GitHub Actions and pushed to Amazon ECR in eu-west-1.",
        "Where does GitHub Actions push the container images?",
        "Which CI system produces our build artifacts, and where do they get stored?",
    ),
    Fact(
        "deploy",
        "Canary releases send 5 percent of traffic to the new version for one hour.",
        "What share of traffic does a canary release get?",
        "During a gradual rollout, how big is the first slice of users and for how long?",
    ),
    # database
    Fact(
        "database",
        "The primary Postgres database runs version 15 on an RDS db.r6g.2xlarge instance.",
        "What Postgres version does the primary database run?",
        "Which release of our main SQL engine is in use?",
    ),
    Fact(
        "database",
        "Read replicas lag at most 2 seconds; anything needing fresh data must query the primary.",
        "How far do read replicas lag behind the primary?",
        "Can I trust a follower copy to be up to date right after a write?",
    ),
    Fact(
        "database",
        "Nightly backups go to the S3 bucket acme-pg-backups and are kept for 35 days.",
        "How long are nightly backups kept in S3?",
        "What is the retention for database dumps and where are they stored?",
    ),
    Fact(
        "database",
        "Redis is used only as a cache and a queue; nothing in it is considered durable.",
        "Is Redis used as a durable store or only as a cache?",
        "Can the key-value server be trusted to keep data permanently?",
    ),
    Fact(
        "database",
        "Connection pooling goes through PgBouncer in transaction mode with a pool size of 40.",
        "What pool size does PgBouncer use?",
        "Which middleman multiplexes client sessions to SQL, and what is its limit?",
    ),
    Fact(
        "database",
        "Columns are named in snake_case and every table has created_at and updated_at fields.",
        "Does every table need created_at and updated_at columns?",
        "What naming convention applies to SQL schemas?",
    ),
    Fact(
        "database",
        "Slow queries over 500 ms are logged to pg_stat_statements and reviewed every Thursday.",
        "When are slow queries from pg_stat_statements reviewed?",
        "Is there a weekly look at sluggish SQL, and on which weekday?",
    ),
    Fact(
        "database",
        "Any migration that drops a column needs a second reviewer from the data platform team.",
        "Who must review a migration that drops a column?",
        "If my schema change deletes a field, whose sign-off is required?",
    ),
    # billing
    Fact(
        "billing",
        "Invoices are generated by Stripe on the 1st of each month and emailed as PDFs.",
        "When does Stripe generate invoices?",
        "On which date do customers receive their bills?",
    ),
    Fact(
        "billing",
        "Failed card payments are retried three times over 7 days before the account is suspended.",
        "How many times are failed card payments retried?",
        "What happens when a customer charge keeps bouncing?",
    ),
    Fact(
        "billing",
        "Enterprise plans are billed annually in advance, with net-30 payment terms.",
        "Are enterprise plans billed annually?",
        "For large corporate customers, how often do we charge them and how long do they get?",
    ),
    Fact(
        "billing",
        "Refunds over 500 euros need approval from Lena Vogel in finance.",
        "Who approves refunds over 500 euros?",
        "Whose okay is required to give a big amount of money back to a client?",
    ),
    Fact(
        "billing",
        "VAT is calculated by Stripe Tax; we never compute sales tax ourselves.",
        "Does Stripe Tax calculate VAT?",
        "Which tool figures out the levies added to each purchase?",
    ),
    Fact(
        "billing",
        "The free tier allows 3 projects and 1,000 API calls per month.",
        "How many API calls does the free tier allow per month?",
        "What limits apply to users who have not paid?",
    ),
    Fact(
        "billing",
        "Usage-based charges are metered in ClickHouse and synced to Stripe every hour.",
        "How often are usage charges synced to Stripe?",
        "Where is consumption tracked before it lands on the bill?",
    ),
    Fact(
        "billing",
        "Discounts above 20 percent must be signed off by the VP of Sales, Tomas Reyes.",
        "Who signs off discounts above 20 percent?",
        "Which executive has to approve a big price cut for a deal?",
    ),
    # people
    Fact(
        "people",
        "Priya Nair leads the payments team and makes the final decision on checkout changes.",
        "Who leads the payments team?",
        "Who owns the purchase flow?",
    ),
    Fact(
        "people",
        "Marco Bianchi, the CTO, would rather read a design doc than sit through a meeting.",
        "Does Marco Bianchi prefer a design doc or a meeting?",
        "Is our chief technology officer fond of calls, or of documents?",
    ),
    Fact(
        "people",
        "Aiko Tanaka is the only person with admin access to the AWS root account.",
        "Who has admin access to the AWS root account?",
        "Which colleague holds the top-level cloud credentials?",
    ),
    Fact(
        "people",
        "Sam Okafor is our only site reliability engineer and works from Lisbon.",
        "Where does Sam Okafor work from?",
        "Who handles SRE duties, and in which city are they based?",
    ),
    Fact(
        "people",
        "Elena Petrova owns the iOS and Android apps.",
        "Who owns the iOS and Android apps?",
        "Which person is responsible for our phone clients?",
    ),
    Fact(
        "people",
        "David Cohen is the security champion for the platform group and reviews all IAM changes.",
        "Who reviews IAM changes for the platform group?",
        "Whose approval is required before modifying cloud permissions?",
    ),
    Fact(
        "people",
        "Fatima Zahra runs the weekly engineering all-hands on Wednesdays at 4 pm.",
        "Who runs the weekly engineering all-hands?",
        "Who hosts the company-wide tech meeting every seven days?",
    ),
    Fact(
        "people",
        "Jonas Berg is the go-to person for the legacy Perl billing scripts.",
        "Who knows the legacy Perl billing scripts?",
        "Whom should I ask about old invoicing code nobody else understands?",
    ),
    # preferences
    Fact(
        "preferences",
        "Priya prefers pull requests under 400 lines and asks for big ones to be split.",
        "How many lines should a pull request have for Priya?",
        "What diff size is acceptable to the payments lead?",
    ),
    Fact(
        "preferences",
        "The team writes Python with type hints everywhere and runs mypy in strict mode.",
        "Do we run mypy in strict mode?",
        "Are static annotations required in our code?",
    ),
    Fact(
        "preferences",
        "Marco wants all architecture decisions recorded as ADRs in the docs/adr folder.",
        "Where are architecture decisions recorded as ADRs?",
        "Where do design choices get written down?",
    ),
    Fact(
        "preferences",
        "The user prefers answers in British English with metric units.",
        "Does the user prefer British English?",
        "Which spelling and measurement system should replies follow?",
    ),
    Fact(
        "preferences",
        "Commit messages follow Conventional Commits, like feat: or fix: prefixes.",
        "Which convention do commit messages follow?",
        "Is there a required format for describing changes in git history?",
    ),
    Fact(
        "preferences",
        "Aiko prefers async updates in Slack threads over video calls.",
        "Does Aiko prefer Slack threads or video calls?",
        "Would Tanaka rather get written messages than join a meeting?",
    ),
    Fact(
        "preferences",
        "We format code with Ruff and keep lines to 100 characters.",
        "Which line length does Ruff enforce?",
        "What is the maximum width allowed for source text in the repo?",
    ),
    Fact(
        "preferences",
        "Dashboards should use the Grafana dark theme with UTC timestamps.",
        "Should Grafana dashboards show UTC timestamps?",
        "Which colour scheme and clock zone are the charts expected in?",
    ),
    # security
    Fact(
        "security",
        "Secrets live in HashiCorp Vault and are injected at runtime; none are stored in git.",
        "Are secrets stored in Vault or in git?",
        "Where do passwords and API keys belong?",
    ),
    Fact(
        "security",
        "All laptops must have FileVault disk encryption and auto-lock after 5 minutes.",
        "Must laptops have disk encryption?",
        "What rules apply to work computers regarding idle screens and encrypting drives?",
    ),
    Fact(
        "security",
        "SSO through Okta is mandatory for every internal tool, with hardware keys for admins.",
        "Is SSO through Okta mandatory for internal tools?",
        "Which identity provider do staff sign into company apps with?",
    ),
    Fact(
        "security",
        "Dependabot alerts rated critical must be patched within 48 hours.",
        "How fast must critical Dependabot alerts be patched?",
        "What is the deadline for fixing severe vulnerable libraries?",
    ),
    Fact(
        "security",
        "Penetration tests are done yearly by NCC Group, the last one in September.",
        "Who does our penetration tests?",
        "Which outside firm audits the app by trying to hack it, and when?",
    ),
    Fact(
        "security",
        "Customer data must never leave the EU region, per our DPA with clients.",
        "Can customer data leave the EU region?",
        "Is it allowed to store user records in America?",
    ),
    Fact(
        "security",
        "API tokens expire after 90 days and are rotated by a cron job in the ops repo.",
        "When do API tokens expire?",
        "How long do access keys for programmatic clients remain valid?",
    ),
    Fact(
        "security",
        "Production SSH access is only via the Teleport bastion, and sessions are recorded.",
        "Is production SSH access only via Teleport?",
        "How do engineers log into live servers, and is that monitored?",
    ),
    # oncall
    Fact(
        "oncall",
        "The on-call rotation changes every Monday at 10:00 and is managed in PagerDuty.",
        "When does the on-call rotation change in PagerDuty?",
        "What weekday does the pager handover happen?",
    ),
    Fact(
        "oncall",
        "Sev1 incidents require a page to the incident commander within 5 minutes.",
        "How quickly must the incident commander be paged for Sev1?",
        "For the worst outages, how fast does the lead responder get alerted?",
    ),
    Fact(
        "oncall",
        "Every incident gets a blameless postmortem written within 3 business days.",
        "When is a blameless postmortem written after an incident?",
        "How soon after an outage do we need the retro doc?",
    ),
    Fact(
        "oncall",
        "On-call engineers get a 150 euro stipend per week on rotation.",
        "How big is the on-call stipend per week?",
        "Is there extra pay for carrying the pager?",
    ),
    Fact(
        "oncall",
        "The runbook for checkout outages is in Notion under Runbooks/Checkout.",
        "Where is the runbook for checkout outages?",
        "Where can I find the playbook when purchases break?",
    ),
    Fact(
        "oncall",
        "Alertmanager sends non-urgent alerts to the #alerts-low Slack channel.",
        "Which Slack channel gets non-urgent alerts?",
        "Where do minor warnings get posted?",
    ),
    Fact(
        "oncall",
        "An unacknowledged page escalates to the secondary after 15 minutes, then to the manager.",
        "When does an unacknowledged page escalate to the secondary?",
        "If nobody answers the pager, who is contacted next?",
    ),
    Fact(
        "oncall",
        "During outages the incident commander updates status.acme.io every 30 minutes.",
        "How often is status.acme.io updated during outages?",
        "How frequently should the public health dashboard be refreshed while things are broken?",
    ),
    # networking
    Fact(
        "networking",
        "All services talk over a private VPC in eu-west-1 with CIDR 10.20.0.0/16.",
        "What CIDR does the private VPC use?",
        "Which address range is assigned to our internal cloud network?",
    ),
    Fact(
        "networking",
        "Cloudflare sits in front of every public domain and handles TLS termination.",
        "Does Cloudflare handle TLS termination?",
        "What terminates encrypted web connections at the edge?",
    ),
    Fact(
        "networking",
        "Internal DNS names end in .acme.internal and resolve through Route 53 private zones.",
        "Which suffix do internal DNS names end in?",
        "What domain suffix do in-house hostnames carry?",
    ),
    Fact(
        "networking",
        "The office VPN is WireGuard, and configs are issued by the IT helpdesk.",
        "Who issues WireGuard VPN configs?",
        "How do I reach internal systems remotely?",
    ),
    Fact(
        "networking",
        "Service-to-service traffic uses mutual TLS through the Linkerd mesh.",
        "Does service-to-service traffic use mutual TLS?",
        "Are calls between microservices encrypted and authenticated?",
    ),
    Fact(
        "networking",
        "The public load balancer idle timeout is 120 seconds, so long requests must stream.",
        "What is the idle timeout on the public load balancer?",
        "Why do my lengthy HTTP calls get cut off?",
    ),
    Fact(
        "networking",
        "Egress goes through a NAT gateway with static IP 52.18.44.7 for partner allowlists.",
        "What is the static IP of the NAT gateway?",
        "Which outbound address should clients whitelist?",
    ),
    Fact(
        "networking",
        "Rate limiting at the edge allows 600 requests per minute per API key.",
        "How many requests per minute does rate limiting allow?",
        "What throttle applies to a single client credential?",
    ),
    # testing
    Fact(
        "testing",
        "Unit tests must finish in under 5 minutes in CI, or the pipeline fails.",
        "How long can unit tests take in CI?",
        "What is the time budget for the fast checks on every push?",
    ),
    Fact(
        "testing",
        "End-to-end tests use Playwright against a seeded staging database every night.",
        "What tool do end-to-end tests use?",
        "Which browser automation framework drives our full-journey checks?",
    ),
    Fact(
        "testing",
        "Code coverage must stay above 80 percent on new code, enforced by Codecov.",
        "What code coverage does Codecov enforce?",
        "Is there a minimum share of lines exercised by automated checks?",
    ),
    Fact(
        "testing",
        "Flaky tests are quarantined with the @flaky marker and tracked in Jira project QA.",
        "How are flaky tests quarantined?",
        "What happens to checks that pass and fail at random?",
    ),
    Fact(
        "testing",
        "Load tests run with k6 before each major release, targeting 2,000 requests per second.",
        "Which tool runs load tests before a major release?",
        "How do we stress the system ahead of big launches, and at what throughput?",
    ),
    Fact(
        "testing",
        "Contract tests between the web app and the API use Pact, with a broker at pact.acme.io.",
        "Do contract tests between the web app and API use Pact?",
        "How are frontend and backend kept compatible?",
    ),
    Fact(
        "testing",
        "Tests must not hit real third-party services; use the WireMock stubs in tests/stubs.",
        "Where are the WireMock stubs for tests?",
        "Can automated checks call external providers directly?",
    ),
    Fact(
        "testing",
        "Every bug fix needs a regression test that fails before the fix.",
        "Does every bug fix need a regression test?",
        "When repairing a defect, what must accompany the change?",
    ),
    # data
    Fact(
        "data",
        "The analytics warehouse is Snowflake, loaded hourly from Postgres by Fivetran.",
        "How often does Fivetran load Postgres into the Snowflake warehouse?",
        "Where do business reports pull their numbers from, and how fresh are they?",
    ),
    Fact(
        "data",
        "dbt models live in the analytics-dbt repo and run every morning at 06:00 UTC.",
        "When do the dbt models run?",
        "At what hour are the transformation jobs scheduled each day?",
    ),
    Fact(
        "data",
        "Product events are tracked with Segment and forwarded to Amplitude.",
        "Where does Segment forward product events?",
        "Which tool collects user clicks, and where do they end up?",
    ),
    Fact(
        "data",
        "Personal data in the warehouse is hashed with SHA-256 before analysts can query it.",
        "Is personal data hashed in the warehouse?",
        "Are names and emails visible to people running reports?",
    ),
    Fact(
        "data",
        "Looker is the only approved BI tool; Tableau licenses were cancelled in 2023.",
        "Is Looker the only approved BI tool?",
        "Which dashboarding product should analysts pick?",
    ),
    Fact(
        "data",
        "Raw event data is kept for 13 months, then deleted by a lifecycle rule.",
        "How long is raw event data kept?",
        "What is the retention window for unprocessed tracking logs?",
    ),
    Fact(
        "data",
        "The churn model is retrained monthly by Wei Zhang on Databricks.",
        "Who retrains the churn model?",
        "Who refreshes the prediction of customers leaving, and how often?",
    ),
    Fact(
        "data",
        "Data quality checks run with Great Expectations and block the pipeline on failure.",
        "Do Great Expectations data quality checks block the pipeline?",
        "What stops bad records from flowing into reports?",
    ),
    # vendors
    Fact(
        "vendors",
        "Our email provider is Postmark; SendGrid was dropped after deliverability issues.",
        "Which email provider replaced SendGrid?",
        "Which service sends our transactional messages?",
    ),
    Fact(
        "vendors",
        "The AWS contract renews every July, with a committed spend of 1.2 million dollars.",
        "When does the AWS contract renew?",
        "When is our cloud agreement up, and how much did we commit?",
    ),
    Fact(
        "vendors",
        "Datadog was replaced by Grafana Cloud in 2024 to cut observability costs.",
        "Why was Datadog replaced by Grafana Cloud?",
        "Which monitoring platform are we on now, and why did we switch?",
    ),
    Fact(
        "vendors",
        "Support tickets are handled in Zendesk, with Intercom only for in-app chat.",
        "Are support tickets handled in Zendesk or Intercom?",
        "Which helpdesk software do agents answer customers in?",
    ),
    Fact(
        "vendors",
        "Legal reviews go to the outside firm Hartley & Moss, billed at 400 pounds an hour.",
        "Which outside firm does legal reviews?",
        "Who are our lawyers and what do they charge?",
    ),
    Fact(
        "vendors",
        "GitHub Enterprise seats are capped at 120; new seats need approval from IT.",
        "How many GitHub Enterprise seats are there?",
        "Is there a limit on licenses for the code hosting platform?",
    ),
    Fact(
        "vendors",
        "Any new SaaS vendor must pass a security questionnaire run by David Cohen.",
        "Must a new SaaS vendor pass a security questionnaire?",
        "What review is required before buying a third-party tool?",
    ),
    Fact(
        "vendors",
        "Twilio handles SMS for two-factor codes, at about 0.05 dollars per message.",
        "Does Twilio handle SMS for two-factor codes?",
        "Which provider texts people their login verification numbers?",
    ),
    # office
    Fact(
        "office",
        "The Berlin office is at Torstrasse 115, third floor, and opens at 8 am.",
        "Where is the Berlin office?",
        "What is the street address of our site in the German capital?",
    ),
    Fact(
        "office",
        "Guests must be registered at reception a day ahead through Envoy.",
        "How are guests registered at reception?",
        "What should I arrange before a visitor comes in?",
    ),
    Fact(
        "office",
        "Desks are booked with the Robin app, at most three days in advance.",
        "How are desks booked in Robin?",
        "Where can I reserve a workspace in the building, and how early?",
    ),
    Fact(
        "office",
        "The Lisbon office has a quiet room on the second floor for focus work.",
        "Is there a quiet room in the Lisbon office?",
        "Where can I concentrate without noise in Portugal?",
    ),
    Fact(
        "office",
        "Lunch is catered on Tuesdays and Thursdays by Green Bowl.",
        "Which days is lunch catered?",
        "When does the company provide free food?",
    ),
    Fact(
        "office",
        "Badges are printed by facilities; a lost badge costs 25 euros to replace.",
        "What does it cost to replace a lost badge?",
        "What happens if I misplace my access card?",
    ),
    Fact(
        "office",
        "The office Wi-Fi for guests is Acme-Guest, with the password rotated monthly.",
        "What is the guest Wi-Fi network at the office?",
        "How do visitors connect to the internet here?",
    ),
    Fact(
        "office",
        "Parking in the Berlin garage must be requested from Hannah Kluge by Thursday.",
        "Who handles parking requests for the Berlin garage?",
        "Whom do I ask for a car spot?",
    ),
    # hiring
    Fact(
        "hiring",
        "Engineering candidates get a 90-minute pair programming session, not a take-home test.",
        "Do engineering candidates get a pair programming session?",
        "What is the technical interview format for developers?",
    ),
    Fact(
        "hiring",
        "Every offer needs sign-off from the hiring manager and Marco before it goes out.",
        "Who signs off on an offer before it goes out?",
        "Whose approval is required to extend a job proposal?",
    ),
    Fact(
        "hiring",
        "Referral bonuses are 3,000 euros, paid after the new hire's probation ends.",
        "How many euros are referral bonuses?",
        "What do I earn if someone I recommend joins?",
    ),
    Fact(
        "hiring",
        "Interview feedback must be submitted in Greenhouse within 24 hours.",
        "When must interview feedback be submitted in Greenhouse?",
        "How soon after meeting an applicant should I write up my notes?",
    ),
    Fact(
        "hiring",
        "We hire remotely within the EU, but not in the US because of payroll setup.",
        "Do we hire remotely outside the EU?",
        "Can someone living in America join as an employee?",
    ),
    Fact(
        "hiring",
        "New engineers get a buddy for their first 6 weeks and ship to production in week one.",
        "How long do new engineers get a buddy?",
        "What onboarding support is there for fresh hires?",
    ),
    Fact(
        "hiring",
        "Salary bands are public internally on the Notion compensation page.",
        "Where are salary bands published?",
        "Can I see pay ranges for each level?",
    ),
    Fact(
        "hiring",
        "Nadia Haddad coordinates recruiting and books all onsite interview loops.",
        "Who books onsite interview loops?",
        "Which person arranges candidate schedules?",
    ),
    # release
    Fact(
        "release",
        "Mobile releases go out every second Tuesday after QA signs off on TestFlight builds.",
        "When do mobile releases go out?",
        "How often do the phone apps ship new versions?",
    ),
    Fact(
        "release",
        "Version numbers follow SemVer, and breaking API changes require a major bump.",
        "Do version numbers follow SemVer?",
        "What happens to the label when an incompatible interface update ships?",
    ),
    Fact(
        "release",
        "The changelog is generated from PR labels by release-please.",
        "How is the changelog generated?",
        "What tool writes the notes of what changed, and from which source?",
    ),
    Fact(
        "release",
        "Release branches are cut on Monday morning and named release/YYYY-MM-DD.",
        "When are release branches cut?",
        "Which weekday do we fork off the stabilization line, and what is it called?",
    ),
    Fact(
        "release",
        "Hotfixes skip the release train but still need two approvals.",
        "Do hotfixes need two approvals?",
        "Can an urgent patch bypass the normal schedule, and what review does it require?",
    ),
    Fact(
        "release",
        "Web app releases are announced in the #releases channel by the release captain.",
        "Where are web app releases announced?",
        "Where can I read about newly shipped changes?",
    ),
    Fact(
        "release",
        "Android builds are signed with the upload key kept in Google Play App Signing.",
        "Where is the upload key for Android builds kept?",
        "Which store service holds the certificate for our phone package?",
    ),
    Fact(
        "release",
        "Deprecated API endpoints stay live for 6 months after the sunset notice.",
        "How long do deprecated API endpoints stay live?",
        "Once removal of old routes is announced, what grace period do clients receive?",
    ),
    # support
    Fact(
        "support",
        "First response time for paid customers is 4 business hours.",
        "What is the first response time for paid customers?",
        "How quickly should users on a plan hear back from us?",
    ),
    Fact(
        "support",
        "Tier-2 support escalates bugs to engineering through the Jira SUP project.",
        "How does tier-2 support escalate bugs to engineering?",
        "What path do problems reported by clients take to reach developers?",
    ),
    Fact(
        "support",
        "Support works from 08:00 to 20:00 CET on weekdays, with no weekend coverage.",
        "What hours does support work on weekdays?",
        "Can a customer reach a human on Saturday?",
    ),
    Fact(
        "support",
        "Support macros live in Zendesk and are reviewed each quarter by Olga Ivanova.",
        "Who reviews the support macros in Zendesk?",
        "Who maintains the canned replies for customer tickets?",
    ),
    Fact(
        "support",
        "CSAT is surveyed after every closed ticket, and the target is 92 percent.",
        "What is the CSAT target for closed tickets?",
        "How happy do we aim for clients to be, as scored once a case ends?",
    ),
    Fact(
        "support",
        "Enterprise customers have a dedicated Slack Connect channel with their account manager.",
        "Do enterprise customers have a Slack Connect channel?",
        "How do our biggest clients talk to us directly?",
    ),
    Fact(
        "support",
        "The public help center runs on Document360 at help.acme.io.",
        "Where does the help center run?",
        "Which platform hosts our knowledge base articles for users?",
    ),
    Fact(
        "support",
        "Outage credits are 10 percent of the monthly fee for each hour below the 99.9 SLA.",
        "How are outage credits calculated against the SLA?",
        "What compensation do clients receive for downtime?",
    ),
)


def check_corpus() -> None:
    """Raise ``ValueError`` naming the first fact whose questions break the corpus's rules."""
    seen: set[str] = set()
    for fact in FACTS:
        memory = set(terms(fact.memory))
        shared = memory & set(terms(fact.paraphrased))
        if shared:
            raise ValueError(f"paraphrase shares {sorted(shared)} with {fact.memory!r}")
        if len(memory & set(terms(fact.lexical))) < 2:
            raise ValueError(f"lexical question shares under 2 words with {fact.memory!r}")
        for text in (fact.memory, fact.lexical, fact.paraphrased):
            if text in seen:
                raise ValueError(f"{text!r} of {fact.memory!r} appears twice in the corpus")
            seen.add(text)


_PEOPLE = (
    "Ana Silva", "Ben Carter", "Chloe Martin", "Dmitri Volkov", "Esra Demir", "Felix Wagner",
    "Grace Kim", "Hugo Laurent", "Ines Costa", "Jack Murphy", "Kira Sato", "Liam Walsh",
    "Maya Patel", "Noah Fischer", "Olivia Brown", "Pablo Ruiz", "Quinn Taylor", "Rosa Moreno",
    "Stefan Horvat", "Tara Singh", "Umar Sheikh", "Vera Novak", "Will Evans", "Zoe Adams",
)  # fmt: skip
_TEAMS = (
    "Atlas", "Beacon", "Cobalt", "Driftwood", "Ember", "Falcon", "Granite", "Harbor", "Juniper",
    "Keystone", "Lighthouse", "Meridian",
)  # fmt: skip
_SERVICES = (
    "checkout-api", "ledger", "search-indexer", "notifier", "auth-gateway", "invoice-worker",
    "media-resizer", "geo-lookup", "report-builder", "webhook-relay", "profile-service",
    "cart-service", "pricing-engine", "feed-ranker", "audit-log", "export-worker",
    "session-store", "catalog-api",
)  # fmt: skip
_TOOLS = (
    "Terraform", "Helm", "Grafana", "Sentry", "Jenkins", "Buildkite", "Kafka", "Airflow",
    "Metabase", "Honeycomb", "Renovate", "Pulumi",
)  # fmt: skip
_VENDORS = ("Algolia", "Auth0", "Mux", "Cloudinary", "Mailgun", "Fastly", "Typesense", "Vonage")
_CUSTOMERS = (
    "Northwind", "Globex", "Initech", "Umbrella Health", "Stark Logistics", "Wayne Retail",
    "Acme Foods", "Pied Piper", "Hooli", "Soylent Labs",
)  # fmt: skip
_REGIONS = ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-southeast-1", "eu-north-1")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_CITIES = ("Berlin", "Lisbon", "Madrid", "Warsaw", "Dublin")
_LEVELS = ("junior", "mid-level", "senior", "staff", "principal")

# Two per topic: events about made-up teams, services and people, never a policy of FACTS.
_TEMPLATES = (
    "The {team} team deployed {service} {version} to {region} on {day} without downtime.",
    "{person} paused deploys of {service} for {n} hours while the {tool} upgrade finished.",
    "{service} keeps its job history in a Postgres table that grew to {big} GB by {month}.",
    "{person} added an index to the {service} orders query and cut latency by {n} percent.",
    "{person} found that {customer} was invoiced twice in {month} and issued a credit note.",
    "The {service} usage export to Stripe failed on {day} and was re-run by {person}.",
    "{person} from the {team} team is on parental leave until {month}.",
    "{person} moved from the {team} team to {other_team} to work on {service}.",
    "{person} likes pull requests on {service} to include screenshots of the {tool} panels.",
    "{person} would rather pair on {service} bugs in the morning than after lunch.",
    "{person} rotated the {service} credentials after a routine audit on {day}.",
    "A scanner flagged {n} medium findings in {service} {version}; none were exploitable.",
    "{person} was paged {n} times overnight for {service} disk alerts during the {day} shift.",
    "The {service} runbook section on retries was rewritten by {person} in {month}.",
    "{service} in {region} caches DNS lookups for {other} with a {n}-second TTL.",
    "{person} opened port {port} on the {service} security group for the {team} team.",
    "The {service} test suite grew to {big} cases after {person} added {tool} fixtures.",
    "{person} fixed a flaky test in {service} that timed out on {day} CI builds.",
    "{person} built a {tool} dashboard showing {service} signups by region for {month}.",
    "The nightly {service} export to the warehouse took {n} minutes on {day}.",
    "{person} is evaluating {vendor} as a replacement for the {service} backend.",
    "The {vendor} invoice for {month} came to {big} euros, {n} percent above forecast.",
    "The {city} office kitchen ran out of coffee on {day}, {person} reported.",
    "{person} booked meeting room {room} in {city} for the {team} planning session.",
    "{person} interviewed {n} candidates for the {team} backend role in {month}.",
    "The {team} team opened a role for a {level} engineer to work on {service}.",
    "{service} {version} shipped on {day} with {n} bug fixes and a new export option.",
    "{person} drafted the release notes for {service} {version} in {month}.",
    "{person} answered {n} tickets about {service} login errors on {day}.",
    "{customer} asked support for a {service} data export, which {person} sent on {day}.",
)


def distractors(n: int = 1_890, seed: int = 7) -> list[str]:
    """``n`` distinct, seeded sentences on the facts' topics that state none of the facts."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        team, other_team = rng.sample(_TEAMS, 2)
        service, other = rng.sample(_SERVICES, 2)
        text = rng.choice(_TEMPLATES).format(
            team=team,
            other_team=other_team,
            service=service,
            other=other,
            person=rng.choice(_PEOPLE),
            tool=rng.choice(_TOOLS),
            vendor=rng.choice(_VENDORS),
            customer=rng.choice(_CUSTOMERS),
            region=rng.choice(_REGIONS),
            day=rng.choice(_DAYS),
            month=rng.choice(_MONTHS),
            city=rng.choice(_CITIES),
            level=rng.choice(_LEVELS),
            version=f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 12)}",
            n=rng.randint(2, 95),
            big=rng.randint(100, 9_000),
            port=rng.choice((5432, 6379, 8080, 8443, 9090, 9200, 11211)),
            room=f"{rng.choice('ABCD')}{rng.randint(1, 4)}.{rng.randint(1, 20):02d}",
        )
        if text not in seen:
            seen.add(text)
            out.append(text)
    assert len(set(out)) == n
    return out


def corpus() -> tuple[list[str], list[tuple[str, int, bool]]]:
    """The items (the facts' memories, then the distractors) and the questions.

    Each question is (text, index of the item that answers it, paraphrased?),
    a lexical and a paraphrased one per fact.
    """
    items = [fact.memory for fact in FACTS] + distractors()
    questions: list[tuple[str, int, bool]] = []
    for index, fact in enumerate(FACTS):
        questions += [(fact.lexical, index, False), (fact.paraphrased, index, True)]
    return items, questions


check_corpus()

"""A labelled corpus for knowledge search (tests/test_knowledge_search.py): an org's help
center of 500 documents, of which 24 are written answers to the labelled queries and the
rest are generated from sentences of the same domains (so every query's words also occur in
documents that do not answer it), and a second org's 500 documents, every one carrying
`MARK_B`. Deterministic (seeded)."""

from __future__ import annotations

import random

__all__ = ["MARK_B", "QUERIES", "TARGETS", "noise_documents", "org_b_documents"]

MARK_B = "zq-orgb-private"

# key -> (title, markdown text). Each answers the queries that name its key below.
TARGETS: dict[str, tuple[str, str]] = {
    "refund": ("Refunds for online orders", """
Refunds are issued to the original payment card within five business days after the
warehouse receives the parcel. Store credit is offered instead when the receipt is lost."""),
    "badge": ("Badge reader fault E4471", """
Fault E4471 on a door badge reader means the reader lost its network uplink. Power-cycle the
reader and check the patch cable in the comms cupboard."""),
    "vpn": ("Connecting from home", """
Staff working remotely must start the Tunnelblick client before opening the intranet. The
tunnel profile is installed by the laptop enrolment script."""),
    "parental": ("Parental leave", """
New parents receive sixteen weeks of paid leave. Tell your manager eight weeks before the
expected birth or adoption date so cover can be arranged."""),
    "password": ("Resetting a forgotten password", """
If you cannot sign in, use the self-service reset page and confirm with the code sent to
your phone. Accounts lock for fifteen minutes after five failed attempts."""),
    "invoice": ("Invoice numbering", """
Invoices are numbered INV-YYYY-NNNNN and are immutable once sent. A mistake is corrected
with a credit note that references the original invoice number."""),
    "shipping_intl": ("Shipping abroad", """
Parcels to countries outside the customs union need a CN23 declaration. Duties are paid by
the recipient on delivery unless the order was placed as delivered duty paid."""),
    "printer": ("Office printer jams", """
When the third floor copier reports a paper jam, open drawer two and remove the torn sheet
by pulling it towards you. Never use scissors inside the machine."""),
    "expenses": ("Claiming travel expenses", """
Submit taxi, hotel and train receipts in the Expensify app within thirty days of the trip.
Meals are reimbursed up to forty euros per day abroad."""),
    "phishing": ("Suspicious emails", """
Forward any message asking for your credentials to the security mailbox and delete it. Never
click links in an email that urges you to act immediately."""),
    "warranty": ("Product warranty", """
Every kettle and toaster carries a two year warranty against manufacturing defects. Damage
caused by descaling with vinegar is not covered."""),
    "onboarding": ("First day checklist", """
On your first day collect your laptop from the service desk, sign the acceptable use
policy, and book the fire safety induction."""),
    "gdpr": ("Deleting a customer's personal data", """
When a customer asks to be forgotten, erase their records from the CRM within one month and
log the request in the privacy register. Invoices are kept for tax law."""),
    "parking": ("Car park permits", """
Permits for the underground garage are allocated quarterly. Electric vehicles may charge at
bays twelve to twenty for up to four hours."""),
    "sla": ("Support response times", """
Priority one incidents are answered within thirty minutes around the clock. Priority three
requests are handled on the next working day."""),
    "laptop_theft": ("Lost or stolen laptop", """
Report a lost or stolen computer to the service desk at once so it can be wiped remotely,
then file a police report and send the reference number."""),
    "discount": ("Volume discounts", """
Customers ordering more than two hundred units receive a tiered rebate of eight percent,
rising to twelve percent above one thousand units."""),
    "kyc": ("Verifying a new business customer", """
Before opening a trade account, collect the company registration extract and a photo
identity document of a director, and screen both against the sanctions list."""),
    "backup": ("Backups of shared drives", """
Shared drives are snapshotted every night at two o'clock and kept for ninety days. Restore
a deleted folder from the previous versions tab."""),
    "sick": ("Calling in sick", """
If you are ill, phone your team lead before nine in the morning. From the fourth day of
absence a doctor's note is required."""),
    "allergen": ("Allergen labelling", """
Every sandwich label must list the fourteen regulated allergens in bold, including sesame,
celery and mustard."""),
    "wifi": ("Guest wireless network", """
Visitors join the GUEST-WLAN network with the daily passphrase printed at reception. The
guest network cannot reach internal systems."""),
    "pension": ("Company pension", """
The employer matches pension contributions up to six percent of salary. Enrolment is
automatic after three months of service."""),
    "fire": ("Fire alarm procedure", """
When the alarm sounds leave by the nearest stairway, do not use the lifts, and gather at
the assembly point in the north car park."""),
}

# (query, relevant target keys). Lexical (an identifier or rare term), paraphrased (few
# shared words) and mixed queries.
QUERIES: list[tuple[str, set[str]]] = [
    ("how do I get my money back for an order", {"refund"}),
    ("reader shows E4471", {"badge"}),
    ("working from home cannot reach intranet", {"vpn"}),
    ("maternity paternity time off after a baby", {"parental"}),
    ("locked out of my account after too many attempts", {"password"}),
    ("fix a wrong invoice that was already sent", {"invoice"}),
    ("customs paperwork for a parcel to another country", {"shipping_intl"}),
    ("paper stuck in the copier", {"printer"}),
    ("reimbursement of hotel and train tickets", {"expenses"}),
    ("an email asking for my login looks fake", {"phishing"}),
    ("broken toaster still under guarantee", {"warranty"}),
    ("what to do on the first day at the company", {"onboarding"}),
    ("right to be forgotten request", {"gdpr"}),
    ("where can I charge my electric car", {"parking"}),
    ("how fast is a priority one incident answered", {"sla"}),
    ("my computer was stolen", {"laptop_theft"}),
    ("price reduction for large orders", {"discount"}),
    ("checks before opening an account for a company", {"kyc"}),
    ("recover a deleted folder on the shared drive", {"backup"}),
    ("I am ill and cannot come to work", {"sick"}),
    ("which allergens must a sandwich label show", {"allergen"}),
    ("wifi password for visitors", {"wifi"}),
    ("does the employer match retirement savings", {"pension"}),
    ("evacuation when the alarm rings", {"fire"}),
]

_SENTENCES = [
    "Orders placed before noon leave the warehouse the same day.",
    "The service desk is open from eight to six on working days.",
    "Customers can track every parcel from the order confirmation email.",
    "Managers approve holiday requests in the HR portal.",
    "The account team reviews credit limits every quarter.",
    "Printed documents left on the copier are shredded each evening.",
    "Security badges must be worn visibly inside the building.",
    "The finance department closes the books on the fifth working day.",
    "Laptops receive operating system updates every second Tuesday.",
    "A courier collects outgoing mail from reception at four.",
    "Meeting rooms are booked through the calendar and released after fifteen minutes.",
    "Our kettles are tested for safety in an accredited laboratory.",
    "The canteen serves a vegetarian option every day.",
    "Passwords must be at least fourteen characters long.",
    "New suppliers are approved by the procurement team.",
    "Damaged stock is recorded in the warehouse system before disposal.",
    "The customer newsletter goes out on the first Monday of the month.",
    "Staff may work from another office with their manager's agreement.",
    "The intranet lists every department's phone number.",
    "An order can be changed until it is packed.",
    "Gift cards are valid for three years from purchase.",
    "The annual appraisal takes place in March.",
    "Visitors sign in at reception and wear a visitor badge.",
    "Cardboard and plastic go into separate recycling bins.",
    "Each team keeps its own shared drive folder.",
    "Invoices are payable within thirty days unless agreed otherwise.",
    "The help center is available in English, French and German.",
    "Price lists are updated at the start of each year.",
    "The loading dock closes at five in the afternoon.",
    "Training courses are booked through the learning portal.",
    "Complaints are answered within two working days.",
    "The wireless network covers every floor of the building.",
    "The company car policy covers lease vehicles only.",
    "Customer data is stored in data centres inside the union.",
    "Broken chairs are replaced by facilities on request.",
    "The legal team reviews every contract above fifty thousand euros.",
    "Toner cartridges are ordered by the office manager.",
    "A parcel that cannot be delivered is returned to the depot.",
    "Employees receive a payslip on the last working day of the month.",
    "Account statements can be downloaded as PDF.",
]
_TITLES = ["Notes", "Team handbook", "Operations update", "Office guide", "FAQ",
           "Customer service notes", "Warehouse notes", "Finance notes", "IT notes",
           "Facilities notes", "HR notes", "Policy summary"]


def noise_documents(count: int, seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        body = " ".join(rng.sample(_SENTENCES, rng.randint(3, 6)))
        out.append((f"{rng.choice(_TITLES)} {n}", f"{body}\nReference DOC-{10_000 + n}."))
    return out


def org_b_documents(count: int, seed: int = 11) -> list[tuple[str, str]]:
    """The other org: its own copies of the answers and noise, each with MARK_B."""
    rng = random.Random(seed)
    answers = list(TARGETS.values())
    out = []
    for n in range(count):
        if n < len(answers):
            title, text = answers[n]
        else:
            title, text = rng.choice(_TITLES), " ".join(rng.sample(_SENTENCES, 4))
        out.append((f"{title} (B {n})", f"{text}\nInternal {MARK_B} {n}."))
    return out

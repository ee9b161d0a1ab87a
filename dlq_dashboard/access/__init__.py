"""What a reader may see. ``reader.py`` holds who is asking (``Reader``: a role and the mask it
sees through); ``visible.py`` the functions every channel reads entries, groups, jobs, job items,
the audit, timelines and exports through (the pages and the JSON API, the exports, the command
line). The rule for each lives here once: a new page has no other way to reach them."""

"""The demo's MCP server (``agents_app/demo/mcp_server.py``) in a process of its own, as ``make run`` starts it.

``DemoMcpServer(workdir)`` listens on a free port; give its ``url`` to a live stack as
``DEMO_MCP_URL`` and the demo agent declares it.
"""

import subprocess
from pathlib import Path
from typing import Any

from tests.support.live import PYTHON, ROOT, free_port, stop_process, wait_for_port


class DemoMcpServer:
    """The demo MCP server over streamable HTTP on 127.0.0.1, its log in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log = workdir / f"mcp-demo-{self.port}.log"
        with open(self.log, "ab") as log:
            self.proc: subprocess.Popen[Any] = subprocess.Popen(
                [PYTHON, "-m", "agents_app.demo.mcp_server", "--port", str(self.port)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        stop_process(self.proc)

"""The web app as a script, the Hugging Face Spaces convention: `python app/app.py [demo flags]`.

The same as `streamvid demo [demo flags]` (streamvid installed). On a Space, GRADIO_SERVER_NAME/GRADIO_SERVER_PORT
set where it binds; a bind other than loopback needs a login (STREAMVID_AUTH=USER:PASS as a secret).
"""

import sys

from streamvid.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))

# Stands in for ctrun_warm.py (run as it is: python -u THIS --fd 3 ...): says "ready", closes its socket, and exits
# with code 7 only after LINGER seconds, so ctrun sees the socket close long before the exit status exists (as a
# dying warm process under load does).
import os
import socket
import sys
import time

s = socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1]))
s.send(b"ready")
time.sleep(0.1)
s.close()
time.sleep(float(os.environ.get("LINGER", "0.5")))
os._exit(7)

# A module that starts a thread when imported: the warm process must refuse to fork after importing it.
import threading
import time

threading.Thread(target=time.sleep, args=(60,), name="started-at-import", daemon=True).start()

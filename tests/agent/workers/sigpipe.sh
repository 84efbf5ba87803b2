#!/bin/bash
# Dies of SIGPIPE as a worker writing to a pipe whose reader has gone does (ctrun gives workers the default action).
kill -PIPE $$
sleep 5

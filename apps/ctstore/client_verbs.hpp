#pragma once
// `ctstore VERB --endpoint HOST:PORT ...`: look inside a live job's store (see client_verbs.cpp).

namespace ctrun::ctstore {

// True if argv[1] names a client verb (get, set, add, delete, list, wait, watch).
bool is_client_verb(int argc, char** argv);
// Runs the verb; the process exit code (0 ok, 1 not found / timed out / store error, 2 usage).
int run_client_verb(int argc, char** argv);

}  // namespace ctrun::ctstore

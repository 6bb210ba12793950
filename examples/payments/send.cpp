// payments-send: sends a Debit and a FraudCheck command and starts a
// Payment process, then prints their ids. It uses the send API only (the
// cmdbus::client library, no CAF): what a web service or a batch job of the
// application does.
//
//   payments-send [--dsn DSN] [--domain D] [--account A] [--amount CENTS]
//                 [--json]

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <cmdbus/db/command_bus.hpp>
#include <cmdbus/db/error.hpp>
#include <cmdbus/db/pool.hpp>
#include <cmdbus/model/types.hpp>
#include <cmdbus/model/uuid.hpp>
#include <cmdbus/process/manager.hpp>
#include <cmdbus/process/registry.hpp>

#include "payment.hpp"

namespace {

constexpr const char* usage
  = "usage: payments-send [--dsn DSN] [--domain D] [--account A] "
    "[--amount CENTS] [--json]\n"
    "Sends a Debit and a FraudCheck and starts a Payment process in domain\n"
    "D (payments), for account A (acct-1) and CENTS (2500; above 100000 the\n"
    "fraud check refuses and the Payment reverses its Debit). The database:\n"
    "--dsn, else $CMDBUS_DSN, else the libpq environment.\n";

struct options {
  std::string dsn;
  std::string domain = "payments";
  std::string account = "acct-1";
  int64_t amount_cents = 2500;
  bool json = false;
};

options parse(int argc, char** argv) {
  options o;
  if (const char* dsn = std::getenv("CMDBUS_DSN"))
    o.dsn = dsn;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size())
        throw std::invalid_argument{args[i] + " needs a value"};
      return args[++i];
    };
    if (args[i] == "--dsn")
      o.dsn = value();
    else if (args[i] == "--domain")
      o.domain = value();
    else if (args[i] == "--account")
      o.account = value();
    else if (args[i] == "--amount")
      o.amount_cents = std::stoll(value());
    else if (args[i] == "--json")
      o.json = true;
    else
      throw std::invalid_argument{"unknown argument '" + args[i] + "'"};
  }
  return o;
}

} // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string{argv[i]} == "--help" || std::string{argv[i]} == "-h") {
      std::cout << usage;
      return 0;
    }
  options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "payments-send: " << e.what() << "\n" << usage;
    return 1;
  }
  try {
    cmdbus::db::pool_options pool_options;
    pool_options.dsn = o.dsn;
    pool_options.max_size = 2;
    cmdbus::db::pool pool{pool_options};
    cmdbus::command_bus bus{pool};

    // Two commands: each is a row in commandbus.command and a message in
    // the domain's queue, in one transaction.
    auto send = [&](const char* type) {
      cmdbus::send_request req;
      req.domain = o.domain;
      req.command_type = type;
      req.command_id = cmdbus::uuid::random();
      req.data = payments::payment_data(o.account, o.amount_cents);
      return bus.send(req).command_id;
    };
    auto debit = send(payments::debit_type);
    auto fraud_check = send(payments::fraud_check_type);

    // A process: the manager needs the workflow to know its first command.
    auto registry = std::make_shared<cmdbus::process_registry>();
    registry->add(o.domain, payments::payment_workflow());
    cmdbus::process_manager processes{pool, registry};
    auto payment = processes.start(o.domain, payments::payment_type,
                                   payments::payment_data(o.account,
                                                          o.amount_cents));

    if (o.json)
      std::cout << "{\"domain\":\"" << o.domain << "\",\"debit\":\""
                << debit.to_string() << "\",\"fraud_check\":\""
                << fraud_check.to_string() << "\",\"payment\":\""
                << payment.to_string() << "\"}\n";
    else
      std::cout << "Debit       " << debit.to_string() << "\n"
                << "FraudCheck  " << fraud_check.to_string() << "\n"
                << "Payment     " << payment.to_string() << " (process)\n";
    return 0;
  } catch (const cmdbus::db::error& e) {
    std::cerr << "payments-send: " << e.what() << "\n";
    return e.code() == cmdbus::db::errc::connection ? 3 : 4;
  } catch (const std::exception& e) {
    std::cerr << "payments-send: " << e.what() << "\n";
    return 4;
  }
}

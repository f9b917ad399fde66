namespace dtrain { int placeholder_proto = 0; }
